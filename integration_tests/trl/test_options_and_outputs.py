"""TRL: estimator options checked when ``RLLMGRPOConfig`` is built; estimator outputs follow the core's one rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rllm_trl import RLLMGRPOConfig, compute_advantages, prepare_batch

from rllm_plugins import register_rllm_adv_estimator, unregister_rllm_adv_estimator

BASE = {"output_dir": "unused", "use_cpu": True, "bf16": False}
BUILTIN = "rllm-plugins (built-in)"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"epsilom": 0.5},
            f"RLLMGRPOConfig.adv_estimator_kwargs: unknown option 'epsilom' for estimator 'grpo' ({BUILTIN}), which accepts: epsilon. Did you mean 'epsilon'?",
        ),
        ({"epsilon": "1e-4"}, "RLLMGRPOConfig.adv_estimator_kwargs: option 'epsilon' of estimator 'grpo' must be a number >= 0, got str '1e-4'"),
        ({"epsilon": None}, "RLLMGRPOConfig.adv_estimator_kwargs: option 'epsilon' of estimator 'grpo' must be a number >= 0, got NoneType None"),
        ({"epsilon": -1.0}, "RLLMGRPOConfig.adv_estimator_kwargs: option 'epsilon' of estimator 'grpo' must be a finite number >= 0, got -1.0"),
        (
            {"norm_adv_by_std_in_grpo": False},
            "RLLMGRPOConfig.adv_estimator_kwargs: norm_adv_by_std_in_grpo is not an estimator option; set RLLMGRPOConfig.norm_adv_by_std_in_grpo instead",
        ),
    ],
)
def test_bad_estimator_kwargs_fail_when_the_config_is_built(kwargs, message):
    with pytest.raises(ValueError) as error:
        RLLMGRPOConfig(**BASE, adv_estimator_kwargs=kwargs)
    assert str(error.value) == message


def test_an_option_of_one_mapped_estimator_is_accepted_and_one_of_none_is_not():
    config = RLLMGRPOConfig(**BASE, adv_estimator_kwargs={"epsilon": 1e-3}, adv_estimator_map={"judge": "rloo"}, role_column="role")
    assert config.adv_estimator_kwargs == {"epsilon": 1e-3}
    with pytest.raises(ValueError) as error:
        RLLMGRPOConfig(**BASE, adv_estimator="rloo", adv_estimator_kwargs={"epsilon": 1e-3}, adv_estimator_map={"judge": "reinforce"}, role_column="role")
    assert str(error.value) == (
        f"RLLMGRPOConfig.adv_estimator_kwargs: unknown option 'epsilon' for estimators 'rloo' ({BUILTIN}), 'reinforce' ({BUILTIN}), which accept no options."
    )


@pytest.fixture
def centred_estimator():
    """A user estimator returning ``r - mean`` per group in the form the test chooses."""
    names = []

    def make(name, form):
        @register_rllm_adv_estimator(name)
        def estimator(rewards, **_):
            out = [form(r - r.mean()) for r in rewards]
            return out, out

        names.append(name)
        return name

    yield make
    for name in names:
        unregister_rllm_adv_estimator(name)


@pytest.mark.parametrize(
    "form",
    [
        lambda c: torch.tensor(c, dtype=torch.bfloat16),
        lambda c: torch.tensor(c, requires_grad=True),
        lambda c: (float(x) for x in c),
        lambda c: c.astype(np.float16),
    ],
    ids=["bf16-tensor", "requires-grad", "generator", "fp16-array"],
)
def test_estimator_outputs_follow_the_core_rule(centred_estimator, form):
    name = centred_estimator("h_trl_outputs", form)
    batch = prepare_batch(torch.tensor([[1.0], [0.0], [0.5], [0.5]]), torch.ones(1), 2)
    np.testing.assert_allclose(compute_advantages(batch, name), [0.5, -0.5, 0.0, 0.0])


def test_an_output_outside_the_rule_names_the_estimator(centred_estimator):
    name = centred_estimator("h_trl_bad_output", lambda c: "nope")
    batch = prepare_batch(torch.tensor([[1.0], [0.0]]), torch.ones(1), 2)
    with pytest.raises(ValueError, match=r"estimator 'h_trl_bad_output' returned str 'nope'; advantages must be a sequence"):
        compute_advantages(batch, name)


@pytest.mark.parametrize("value", ["false", 0, None])
def test_norm_adv_by_std_in_grpo_must_be_a_bool_when_the_config_is_built(value):
    # "false" is truthy: before, it silently divided by the std
    with pytest.raises(ValueError) as error:
        RLLMGRPOConfig(**BASE, norm_adv_by_std_in_grpo=value)
    assert str(error.value) == f"norm_adv_by_std_in_grpo must be a bool (True or False), got {type(value).__name__} {value!r}"
    assert RLLMGRPOConfig(**BASE, norm_adv_by_std_in_grpo=np.False_).norm_adv_by_std_in_grpo is False


@pytest.mark.parametrize("norm", [True, False])
def test_an_rllm_main_style_estimator_runs_in_trl(norm):
    # rLLM main's signature fn(rewards, algorithm_config, **kwargs); before: TypeError, no algorithm_config
    from rllm_plugins import register_adv_estimator

    @register_adv_estimator("h_trl_main_style")
    def estimator(rewards, algorithm_config, **kwargs):
        out = [(r - r.mean()) / ((r.std() + 1e-6) if algorithm_config.norm_adv_by_std_in_grpo else 1.0) for r in rewards]
        return out, out

    try:
        batch = prepare_batch(torch.tensor([[1.0], [0.0], [0.5], [0.25]]), torch.ones(1), 2)
        got = compute_advantages(batch, "h_trl_main_style", norm_adv_by_std_in_grpo=norm)
    finally:
        unregister_rllm_adv_estimator("h_trl_main_style")
    expected = [0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6), 0.125 / (0.125 + 1e-6), -0.125 / (0.125 + 1e-6)] if norm else [0.5, -0.5, 0.125, -0.125]
    np.testing.assert_allclose(got, expected, rtol=1e-6)


@pytest.mark.parametrize("aggregation", ["sum_then_normalize", "normalize_then_sum"])
def test_an_estimator_editing_its_input_in_place_leaves_the_logged_rewards_alone(make_trainer, aggregation):
    """Before: the estimator got a view of the rewards the metrics are computed from (reward/* logged as 0 here)."""
    name = "h_trl_edits_its_input"

    def edits_in_place(values, offsets, /, **_):
        centred = values - values.mean()
        values[:] = 0.0
        return centred

    @register_rllm_adv_estimator(name, batched=edits_in_place)
    def fn(rewards, **_):
        return rewards, rewards

    try:
        trainer = make_trainer(adv_estimator=name, multi_objective_aggregation=aggregation, max_steps=1)
        trainer.train()
    finally:
        unregister_rllm_adv_estimator(name)
    logged = trainer.state.log_history[0]
    table = trainer.records[0]["rewards_per_func"].double().numpy()
    combined = (table[:, 0] + 0.5 * table[:, 1]).astype(np.float32).astype(np.float64)  # TRL's float32 sum, weights 1 and 0.5
    assert logged["reward/all_groups/mean"] == pytest.approx(combined.mean(), abs=1e-5)
    assert logged["reward/all_groups/reward_length/max"] == pytest.approx(table[:, 0].max(), abs=1e-5)
    assert logged["reward/all_groups/reward_letter_a/mean"] == pytest.approx(table[:, 1].mean(), abs=1e-5)
    assert combined.std() > 0
