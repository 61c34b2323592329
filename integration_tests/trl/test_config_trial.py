"""The trainer runs the selected estimator once on tiny groups when it is built (:func:`rllm_trl.trainer.check_trainer_setup`): a
broken plugin fails before the first step, with the error naming the config field. The config itself only checks names and
options (``rllm_trl.config`` imports no compute module)."""

from __future__ import annotations

import numpy as np
import pytest
from rllm_trl import RLLMGRPOConfig, check_trainer_setup

from rllm_plugins.registry import register_rllm_adv_estimator, unregister_rllm_adv_estimator

BASE = {"output_dir": "unused", "use_cpu": True, "bf16": False}


@pytest.fixture
def registered():
    names: list[str] = []

    def register(name, fn, **kwargs):
        register_rllm_adv_estimator(name, **kwargs)(fn)
        names.append(name)

    yield register
    for name in names:
        unregister_rllm_adv_estimator(name)


def test_a_step_style_function_registered_without_level_step_fails_when_the_trainer_is_built_with_the_hint(registered, make_trainer):
    def turn_credit(rewards, step_rewards, anchor_states=None, **_):
        return step_rewards, step_rewards

    registered("turn_credit", turn_credit)  # level="step" forgotten
    RLLMGRPOConfig(**BASE, adv_estimator="turn_credit")  # names and options only
    with pytest.raises(ValueError) as error:
        make_trainer(adv_estimator="turn_credit")
    message = str(error.value)
    assert message.startswith("RLLMGRPOConfig.adv_estimator: estimator 'turn_credit' (")
    assert "failed a trial on two tiny groups: TypeError:" in message and "missing 1 required positional argument: 'step_rewards'" in message
    assert message.endswith(
        "its signature takes step_rewards, anchor_states, a step-level estimator's: declare level='step' (AdvEstimatorSpec or @register_rllm_adv_estimator)"
    )


def test_a_plugin_returning_the_wrong_number_of_advantages_fails_at_trainer_setup(registered):
    def one_short(rewards, **_):
        return [np.asarray(g)[:-1] for g in rewards], rewards

    registered("one_short", one_short)
    with pytest.raises(
        ValueError, match=r"RLLMGRPOConfig.adv_estimator: estimator 'one_short' .* failed a trial on two tiny groups: .*returned 1 advantages for group 0 of 2"
    ):
        check_trainer_setup(RLLMGRPOConfig(**BASE, adv_estimator="one_short"))


def test_a_step_level_plugin_returning_nan_fails_at_trainer_setup(registered):
    def nan_turns(rewards, step_rewards, anchor_states=None, **_):
        out = [[np.full(len(t), np.nan) for t in g] for g in step_rewards]
        return out, out

    registered("nan_turns", nan_turns, level="step")
    with pytest.raises(
        ValueError, match=r"RLLMGRPOConfig.adv_estimator: estimator 'nan_turns' .* failed a trial on two tiny groups: it returned the non-finite advantage nan"
    ):
        check_trainer_setup(RLLMGRPOConfig(**BASE, adv_estimator="nan_turns"))


def test_working_estimators_build_unchanged():
    for name, kwargs in [("grpo", {}), ("gigpo", {"gamma": 0.9}), ("step_reinforce", {}), ("rloo", {})]:
        assert check_trainer_setup(RLLMGRPOConfig(**BASE, adv_estimator=name, adv_estimator_kwargs=kwargs)).estimator == name


def test_a_mapped_estimator_is_tried_under_its_field(registered):
    def one_short(rewards, **_):
        return [np.asarray(g)[:-1] for g in rewards], rewards

    registered("one_short", one_short)
    config = RLLMGRPOConfig(**BASE, adv_estimator_map={"judge": "one_short"}, role_column="role")
    with pytest.raises(ValueError, match=r"RLLMGRPOConfig.adv_estimator_map\['judge'\]: estimator 'one_short' .* failed a trial on two tiny groups"):
        check_trainer_setup(config)
