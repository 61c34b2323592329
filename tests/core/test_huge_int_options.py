"""Every option of every built-in estimator, given an int beyond the float64 range (``10**400``), is a ``ValueError`` naming it.

The cases are generated from the options themselves (:func:`rllm_plugins.options.spec_options`), so an option added later is covered.
Before, ``math.isfinite(10**400)`` raised a raw ``OverflowError`` from the option checks of ``lam``, ``step_advantage_w``,
``epsilon``, ``min_std``, ``gamma``, ``f_norm`` and a composite weight.
"""

from __future__ import annotations

import numbers

import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.estimators.builtin import rllm_adv_estimators
from rllm_plugins.options import check_estimator_kwargs, spec_options
from rllm_plugins.registry import get_estimator

HUGE = (10**400, -(10**400))
CASES = [(spec.name, option) for spec in rllm_adv_estimators() for option in spec_options(get_estimator(spec.name).spec).defaults]


def real_default(name: str, option: str) -> bool:
    """Whether the option's default is a float (so any int beyond the float64 range is out of its type)."""
    default = spec_options(get_estimator(name).spec).defaults[option]
    return isinstance(default, numbers.Real) and not isinstance(default, (bool, numbers.Integral))


def groups() -> list[TrajectoryGroup]:
    """One task group of two trajectories with everything any built-in reads: step rewards, anchor states, response tokens."""
    trajectories = [
        Trajectory(steps=[Step(reward=r, observation=f"s{t}", response_ids=[1, 2, 3][: t + 1]) for t in range(2)], reward=float(i))
        for i, r in enumerate((1.0, 0.0))
    ]
    return [TrajectoryGroup(trajectories, group_id="task0:agent")]


def test_the_cases_cover_the_options_named_in_the_overflow_report():
    named = {("turn_grpo", "lam"), ("gigpo", "step_advantage_w"), ("grpo", "epsilon"), ("step_reinforce", "min_std"), ("gpg", "f_norm")}
    assert named <= set(CASES)


@pytest.mark.parametrize("value", HUGE, ids=["plus", "minus"])
@pytest.mark.parametrize(("name", "option"), CASES)
def test_a_huge_int_option_is_refused_naming_it_or_computed(name, option, value):
    """Through the check every path shares (collector, TRL config, verl bridge), then the collector itself."""
    try:
        check_estimator_kwargs({name: get_estimator(name)}, {option: value}, where="options", norm_field="norm")
    except ValueError as error:
        assert option in str(error), str(error)
        return
    assert not real_default(name, option), f"{name}: {option}={value} accepted"
    config = AlgorithmConfig(estimator=name, estimator_kwargs={option: value})
    try:
        collect_reward_and_advantage_from_trajectory_groups(groups(), config)
    except ValueError as error:  # accepted as a type (an int), refused by its range where it runs
        assert option in str(error), str(error)


def test_a_huge_composite_weight_is_refused_naming_the_term():
    config = AlgorithmConfig(estimator="composite", estimator_kwargs={"terms": [["grpo", 1.0], ["rloo", 10**400]]})
    with pytest.raises(ValueError, match=r"term 1 \('rloo'\): the weight must be a finite number, got int 10+\.\.\. \(401 characters\)"):
        collect_reward_and_advantage_from_trajectory_groups(groups(), config)


@pytest.mark.parametrize("value", HUGE, ids=["plus", "minus"])
def test_a_huge_reward_weight_is_refused_naming_the_reward(value):
    with pytest.raises(ValueError, match=r"AlgorithmConfig\.reward_weights\['accuracy'\] must be a finite number"):
        AlgorithmConfig(reward_weights={"accuracy": value})
