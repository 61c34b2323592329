"""Estimator options checked before the collector runs; one conversion rule for what estimators return."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from rllm_plugins import (
    AdvEstimatorSpec,
    AlgorithmConfig,
    collect_reward_and_advantage_from_trajectory_groups,
    register_rllm_adv_estimator,
    unregister_rllm_adv_estimator,
)
from rllm_plugins.options import check_estimator_kwargs, spec_options
from rllm_plugins.registry import get_estimator
from rllm_plugins.types import Step, Trajectory, TrajectoryGroup

BUILTIN = "rllm-plugins (built-in)"
WHERE = "AlgorithmConfig.estimator_kwargs"
NORM = "AlgorithmConfig.norm_adv_by_std_in_grpo"


def selected(*names: str) -> dict:
    """``{name: resolved estimator}``, as a config hands them to the options check."""
    return {name: get_estimator(name) for name in names}


def _groups() -> list[TrajectoryGroup]:
    return [TrajectoryGroup([Trajectory(steps=[Step()], reward=1.0), Trajectory(steps=[Step()], reward=0.0)], "t1:solver")]


def _collect(**config: object) -> list[object]:
    groups = _groups()
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(**config))  # type: ignore[arg-type]
    return [t.steps[0].advantage for t in groups[0].trajectories]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epsilom": 0.5}, f"{WHERE}: unknown option 'epsilom' for estimator 'grpo' ({BUILTIN}), which accepts: epsilon. Did you mean 'epsilon'?"),
        ({"epsilon": "1e-4"}, f"{WHERE}: option 'epsilon' of estimator 'grpo' must be a number >= 0, got str '1e-4'"),
        ({"epsilon": None}, f"{WHERE}: option 'epsilon' of estimator 'grpo' must be a number >= 0, got NoneType None"),
        ({"epsilon": -1e-6}, f"{WHERE}: option 'epsilon' of estimator 'grpo' must be a finite number >= 0, got -1e-06"),
        ({"epsilon": True}, f"{WHERE}: option 'epsilon' of estimator 'grpo' must be a number >= 0, got bool True"),
        (
            {"norm_adv_by_std_in_grpo": False},
            f"{WHERE}: norm_adv_by_std_in_grpo is not an estimator option; set AlgorithmConfig.norm_adv_by_std_in_grpo instead",
        ),
        ({"rewards": [1.0]}, f"{WHERE}: 'rewards' is passed by the framework to every estimator call; it cannot be set as an option"),
    ],
)
def test_bad_estimator_kwargs_are_a_value_error_and_nothing_is_written(kwargs, message):
    groups = _groups()
    with pytest.raises(ValueError) as error:
        collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="grpo", estimator_kwargs=kwargs))
    assert str(error.value) == message
    assert all(step.advantage is None for t in groups[0].trajectories for step in t.steps)


def test_a_valid_option_changes_the_result():
    assert _collect(estimator="grpo", estimator_kwargs={"epsilon": 0.5}) == [0.5, -0.5]  # by hand: (1 - 0.5) / (0.5 + 0.5)


def test_the_option_of_a_mapped_estimator_counts_and_one_nobody_takes_is_an_error():
    assert spec_options(get_estimator("rloo").spec).defaults == {}
    check_estimator_kwargs(selected("rloo", "grpo"), {"epsilon": 1e-3}, where=WHERE, norm_field="x")  # grpo takes it
    with pytest.raises(ValueError) as error:
        check_estimator_kwargs(selected("rloo", "opo"), {"epsilon": 1e-3}, where=WHERE, norm_field="x")
    assert str(error.value) == f"{WHERE}: unknown option 'epsilon' for estimators 'rloo' ({BUILTIN}), 'opo' ({BUILTIN}), which accept no options."


@pytest.fixture
def registered():
    names = []

    def register(name, **kwargs):
        def wrap(fn):
            register_rllm_adv_estimator(name, **kwargs)(fn)
            names.append(name)
            return fn

        return wrap

    yield register
    for name in names:
        unregister_rllm_adv_estimator(name)


def test_named_parameters_are_typed_by_their_defaults_and_open_estimators_take_anything(registered):
    @registered("h_typed")
    def typed(rewards, *, scale: float = 1.0, clip: bool = False, rounds: int = 1, mode: str = "a", extra=None):
        return [r * scale for r in rewards], [r * scale for r in rewards]

    @registered("h_open")
    def open_estimator(rewards, **kwargs):
        return list(rewards), list(rewards)

    assert set(spec_options(get_estimator("h_typed").spec).defaults) == {"scale", "clip", "rounds", "mode", "extra"}
    check_estimator_kwargs(selected("h_typed"), {"scale": 2, "clip": np.bool_(True), "rounds": 3, "mode": "b", "extra": object()}, where=WHERE, norm_field="x")
    for key, value, problem in [
        ("scale", "2", "must be a number, got str '2'"),
        ("scale", float("nan"), "must be finite, got nan"),
        ("clip", "false", "must be a bool (True or False), got str 'false'"),
        ("rounds", 1.5, "must be an int, got float 1.5"),
        ("mode", 1, "must be a str, got int 1"),
    ]:
        with pytest.raises(ValueError) as error:
            check_estimator_kwargs(selected("h_typed"), {key: value}, where=WHERE, norm_field="x")
        assert str(error.value) == f"{WHERE}: option {key!r} of estimator 'h_typed' {problem}"
    assert spec_options(get_estimator("h_open").spec).open
    check_estimator_kwargs(selected("h_open"), {"anything": 1}, where=WHERE, norm_field="x")


def test_a_spec_declares_the_options_its_kwargs_read():
    def fn(rewards, **kwargs):
        return list(rewards), list(rewards)

    spec = AdvEstimatorSpec("h_declared", fn=fn, options=["alpha"])
    assert spec.options == ("alpha",)
    declared = spec_options(spec)
    assert (dict(declared.defaults), declared.open) == ({"alpha": inspect.Parameter.empty}, False)
    assert spec_options(AdvEstimatorSpec("h_undeclared", fn=fn)).open
    with pytest.raises(TypeError, match="options must be a sequence of option names"):
        AdvEstimatorSpec("h_declared", fn=fn, options="alpha")


def test_a_spec_declares_its_own_group_size_check_and_it_runs_with_the_users_options():
    from rllm_plugins import AdvEstimatorSpec
    from rllm_plugins.estimators import check_group_size

    def needs_four(options, group_size):
        if group_size < options.get("m", 4):
            raise ValueError(f"m={options.get('m', 4)} needs groups of at least that size, got {group_size}")

    spec = AdvEstimatorSpec("needs_four", batched=lambda values, offsets, /, m=4, **_: values, check_group_size=needs_four)
    check_group_size(spec, {}, 4)
    with pytest.raises(ValueError) as error:
        check_group_size(spec, {"m": 8}, 4)
    assert str(error.value) == "m=8 needs groups of at least that size, got 4"
    with pytest.raises(TypeError, match="check_group_size must be callable"):
        AdvEstimatorSpec("bad_check", batched=lambda values, offsets, /, **_: values, check_group_size=3)


def test_an_open_estimator_refuses_a_near_miss_of_an_option_it_names_on_every_path_that_checks_options(registered):
    # the shape docs/plugins.md shows: named options plus **kwargs; `trimm` used to reach **kwargs and run with trim's default
    @registered("h_trimmed")
    def trimmed(rewards, trim: float = 0.0, **kwargs):
        return [r - trim for r in rewards], [r - trim for r in rewards]

    expected = (
        f"{WHERE}: unknown option 'trimm' for estimator 'h_trimmed' ({get_estimator('h_trimmed').provider}). Did you mean 'trim'? "
        "Its **kwargs would take 'trimm' and the run would use the default of 'trim' without a word. An estimator that does read 'trimm' "
        "declares it: AdvEstimatorSpec(options=('trimm', ...))"
    )
    with pytest.raises(ValueError) as error:
        _collect(estimator="h_trimmed", estimator_kwargs={"trimm": 0.5})
    assert str(error.value) == expected
    assert _collect(estimator="h_trimmed", estimator_kwargs={"trim": 0.5}) == [0.5, -0.5]
    # a key no named option is close to still reaches **kwargs (an open estimator may read anything)
    assert _collect(estimator="h_trimmed", estimator_kwargs={"threshold": 0.5}) == [1.0, 0.0]


def test_the_near_miss_rule_is_difflib_s_ratio_against_the_named_options_only():
    import difflib

    from rllm_plugins.options import NEAR_MISS

    def fn(rewards, *, trim: float = 0.0, window: int = 4, **kwargs):
        return list(rewards), list(rewards)

    spec = AdvEstimatorSpec("h_near", fn=fn)
    from rllm_plugins.spec import Estimator, Provider

    chosen = {"h_near": Estimator(spec, Provider("h", kind="user"))}
    for key in ("trimm", "trin", "windw", "windows", "tri", "alpha", "trim_ratio", "w"):
        refused = any(difflib.SequenceMatcher(None, key, named).ratio() >= NEAR_MISS for named in ("trim", "window"))
        try:
            check_estimator_kwargs(chosen, {key: 1}, where=WHERE, norm_field=NORM)
        except ValueError as error:
            assert refused and "Did you mean" in str(error), key
        else:
            assert not refused, key


def test_trainer_loss_is_words_and_only_an_estimator_naming_one_gets_the_warning():
    from rllm_plugins.spec import unapplied_loss_warning

    def fn(rewards, **kwargs):
        return list(rewards), list(rewards)

    with pytest.raises(TypeError, match=r"estimator 'h_loss': trainer_loss must be a str \(the loss term, in words\), got float"):
        AdvEstimatorSpec("h_loss", fn=fn, trainer_loss=0.05)  # type: ignore[arg-type]
    assert unapplied_loss_warning(AdvEstimatorSpec("h_loss", fn=fn), "h_loss", "a trainer") is None
    named = unapplied_loss_warning(AdvEstimatorSpec("h_loss", fn=fn, trainer_loss="an entropy bonus"), "rllm_h_loss", "a trainer")
    assert named is not None and named.startswith("estimator 'rllm_h_loss': a trainer applies its own loss, not an entropy bonus;")
