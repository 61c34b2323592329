"""Fuzzing the collector: every input gives the documented result or the documented ValueError, never half of one.

The expected result is computed independently, per trajectory with Python's ``statistics``
(exact population std), from the semantics table in DESIGN.md.
"""

import math
import numbers
import statistics
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups

EPS = 1e-6
UNTOUCHED = None  # the advantage every step starts with: no precomputed advantage, so an error must leave it None


def finite_rewards():
    magnitude = st.sampled_from([1.0, 1e-30, 1e30, 1e200])
    mantissa = st.floats(min_value=0.1, max_value=10.0)
    return st.one_of(
        st.sampled_from([0.0, 1.0, -1.0, 0.5, True, False]),
        st.builds(lambda m, s, sign: sign * m * s, mantissa, magnitude, st.sampled_from([-1.0, 1.0])),
        st.integers(min_value=-5, max_value=5),
        st.builds(np.float32, mantissa),
        st.builds(np.int64, st.integers(-3, 3)),
        st.builds(Fraction, st.integers(-3, 3), st.integers(1, 4)),
    )


BAD_REWARDS = [None, math.nan, math.inf, -math.inf, np.float64("nan"), "0.5", [1.0], np.float32("inf"), 1j]


def rewards(allow_bad: bool):
    good = finite_rewards()
    return st.one_of(good, st.sampled_from(BAD_REWARDS)) if allow_bad else good


@st.composite
def batches(draw, allow_bad: bool = True):
    bad_rate = draw(st.sampled_from([0.0, 0.02, 0.2])) if allow_bad else 0.0
    groups = []
    for g in range(draw(st.integers(0, 5))):
        role = draw(st.sampled_from(["solver", "judge", None]))
        size = draw(st.one_of(st.integers(0, 4), st.integers(0, 64)))
        trajectories = []
        for _ in range(size):
            reward = draw(rewards(allow_bad=True)) if draw(st.floats(0, 1)) < bad_rate else draw(rewards(allow_bad=False))
            steps = [Step(response_ids=[1, 2], advantage=UNTOUCHED) for _ in range(draw(st.integers(0, 2)))]
            trajectories.append(Trajectory(steps=steps, reward=reward))
        groups.append(TrajectoryGroup(trajectories, group_id=f"task{g}" if role is None else f"task{g}:{role}"))
    return groups


def is_valid_reward(reward) -> bool:
    """A finite real number; bools count as 0 and 1."""
    return isinstance(reward, numbers.Real) and math.isfinite(reward)


def first_bad_reward(groups):
    """(role, group index, trajectory index) of the first reward the collector must reject, or None."""
    for index, group in enumerate(groups):
        for t, traj in enumerate(group.trajectories):
            if not is_valid_reward(traj.reward):
                return group.group_role, index, t
    return None


def reference_advantages(rewards: list[float], estimator: str) -> list[float]:
    n = len(rewards)
    if estimator == "rloo":
        if n == 1:
            return list(rewards)
        return [r - math.fsum(rewards[:i] + rewards[i + 1 :]) / (n - 1) for i, r in enumerate(rewards)]
    if n == 1:
        return [rewards[0] / (1.0 + EPS)]
    mean, std = statistics.mean(rewards), statistics.pstdev(rewards)  # exact (Fraction) mean: equal rewards give 0, as they must
    return [(r - mean) / (std + EPS) for r in rewards]


CONFIG = AlgorithmConfig(estimator="grpo", estimator_map={"judge": "rloo"})


def assert_close(actual: float, expected: float, scale: float) -> None:
    assert math.isfinite(actual)
    assert math.isclose(actual, expected, rel_tol=1e-8, abs_tol=1e-8 * scale), (actual, expected, scale)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(groups=batches())
def test_the_collector_returns_the_documented_result_or_the_documented_error(groups):
    bad = first_bad_reward(groups)
    if bad is not None:
        role, index, t = bad
        with pytest.raises(ValueError) as caught:
            collect_reward_and_advantage_from_trajectory_groups(groups, CONFIG)
        message = str(caught.value)
        assert f"role {role!r}, group {index} " in message and f"trajectory {t}:" in message, message
        assert all(step.advantage is UNTOUCHED for group in groups for traj in group.trajectories for step in traj.steps)
        return

    metrics = collect_reward_and_advantage_from_trajectory_groups(groups, CONFIG)

    rewards_by_role: dict[str, list[float]] = {}
    advantages_by_role: dict[str, list[float]] = {}
    for group in groups:
        if not group.trajectories:
            continue
        role = group.group_role
        rewards = [float(traj.reward) for traj in group.trajectories]
        expected = reference_advantages(rewards, CONFIG.estimator_name(role))
        scale = max(1.0, *map(abs, expected))
        for traj, advantage in zip(group.trajectories, expected, strict=True):
            for step in traj.steps:
                assert_close(step.advantage, advantage, scale)
        rewards_by_role.setdefault(role, []).extend(rewards)
        advantages_by_role.setdefault(role, []).extend(expected)

    assert {key.split("/")[1] for key in metrics} == set(rewards_by_role)
    for role, rewards in rewards_by_role.items():
        scale = max(map(abs, rewards))
        assert_close(metrics[f"reward/{role}/mean"], statistics.fmean(rewards), scale)
        assert_close(metrics[f"reward/{role}/std"], statistics.pstdev(rewards), scale)
        assert metrics[f"reward/{role}/max"] == max(rewards) and metrics[f"reward/{role}/min"] == min(rewards)
        advantages = advantages_by_role[role]
        scale = max(1.0, *map(abs, advantages))
        assert_close(metrics[f"advantage/{role}/mean"], statistics.fmean(advantages), scale)
        assert_close(metrics[f"advantage/{role}/std"], statistics.pstdev(advantages), scale)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(groups=batches(allow_bad=False), estimator=st.sampled_from(["grpo", "rloo", "reinforce_plus_plus_baseline", "prpo", "opo", "trl_grpo"]))
def test_every_builtin_gives_finite_advantages_to_every_step_for_finite_rewards(groups, estimator):
    metrics = collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator=estimator))
    for group in groups:
        for traj in group.trajectories:
            for step in traj.steps:
                assert isinstance(step.advantage, float) and math.isfinite(step.advantage)
    assert all(math.isfinite(value) for value in metrics.values())


def test_a_reward_that_is_a_string_names_role_group_and_trajectory():
    groups = [
        TrajectoryGroup([Trajectory(steps=[Step(advantage=UNTOUCHED)], reward=1.0)], group_id="a:solver"),
        TrajectoryGroup([Trajectory(steps=[Step(advantage=UNTOUCHED)], reward=0.0), Trajectory(steps=[Step()], reward="1")], group_id="b:judge"),
    ]
    with pytest.raises(ValueError, match=r"role 'judge', group 1 \(group_id 'b:judge'\), trajectory 1: trajectory reward must be a real number, got str"):
        collect_reward_and_advantage_from_trajectory_groups(groups, CONFIG)
    assert groups[0].trajectories[0].steps[0].advantage is UNTOUCHED


def test_an_advantage_that_overflows_is_an_error_and_nothing_is_written():
    # rloo's n/(n-1) * (r - mean) exceeds the float64 range: the true value cannot be represented
    groups = [
        TrajectoryGroup([Trajectory(steps=[Step(advantage=UNTOUCHED)], reward=r) for r in (0.0, 1.0)], group_id="a:solver"),
        TrajectoryGroup([Trajectory(steps=[Step(advantage=UNTOUCHED)], reward=r) for r in (1.5e308, -1.5e308)], group_id="b:judge"),
    ]
    with pytest.raises(ValueError, match=r"estimator 'rloo' .* role 'judge', group 1 .*trajectory 0 got advantage inf; advantages must be finite"):
        collect_reward_and_advantage_from_trajectory_groups(groups, CONFIG)
    assert all(step.advantage is UNTOUCHED for group in groups for traj in group.trajectories for step in traj.steps)
