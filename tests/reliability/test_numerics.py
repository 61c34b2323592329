"""Numerics: large and tiny magnitudes, mixed signs, no cancellation and no overflow to inf."""

import math
import statistics

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups, get_rllm_adv_estimator
from rllm_plugins.estimators import BUILTIN_SPECS

BUILTINS = [spec.name for spec in BUILTIN_SPECS if spec.level == "outcome" and not spec.stateful]  # step-level: tests/steps; stateful: test_rae_*
EPS = 1e-6


def huge_groups(scale: float, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.choice([-1.0, 1.0], n) * rng.uniform(0.1, 10.0, n) * scale for n in (2, 3, 8, 64, 1, 17)]


def with_lengths(rewards: list[np.ndarray]) -> dict:
    return {"lengths": np.arange(1.0, 1.0 + sum(r.size for r in rewards))}


@pytest.mark.parametrize("name", BUILTINS)
@pytest.mark.parametrize("scale", [1e-30, 1e30, 1e200])
def test_every_builtin_stays_finite_for_extreme_mixed_sign_rewards(name, scale):
    rewards = huge_groups(scale)
    advantages, _ = get_rllm_adv_estimator(name)(rewards=rewards, **with_lengths(rewards))
    for a, r in zip(advantages, rewards, strict=True):
        assert a.shape == r.shape and np.isfinite(a).all()


@pytest.mark.parametrize("scale", [1e-30, 1.0, 1e30, 1e200])
def test_grpo_matches_an_exact_population_std_at_every_magnitude(scale):
    rewards = huge_groups(scale)
    advantages, _ = get_rllm_adv_estimator("grpo")(rewards=rewards)
    for a, r in zip(advantages, rewards, strict=True):
        values = r.tolist()
        if len(values) == 1:
            expected = [values[0] / (1.0 + EPS)]
        else:
            mean, std = statistics.fmean(values), statistics.pstdev(values)  # exact (rational) std
            expected = [(x - mean) / (std + EPS) for x in values]
        np.testing.assert_allclose(a, expected, rtol=1e-9, atol=1e-9 * max(map(abs, expected)))


def test_grpo_has_no_cancellation_for_a_small_spread_on_a_huge_offset():
    base, step = 2.0**100, 2.0**50  # ~1.3e30 and ~1.1e15, both exact in float64
    advantages, _ = get_rllm_adv_estimator("grpo")(rewards=[np.array([base, base + step, base + 2 * step])])
    np.testing.assert_allclose(advantages[0], [-math.sqrt(1.5), 0.0, math.sqrt(1.5)], rtol=1e-9, atol=1e-12)


def test_tiny_rewards_are_centred_exactly_without_normalisation():
    advantages, _ = get_rllm_adv_estimator("grpo")(rewards=[np.array([1e-30, -1e-30, 3e-30])], norm_adv_by_std_in_grpo=False)
    np.testing.assert_allclose(advantages[0], [0.0, -2e-30, 2e-30], rtol=1e-12, atol=1e-45)


def test_rloo_on_1e200_rewards_matches_the_leave_one_out_mean():
    rewards = [np.array([1e200, -3e200, 2e200, 5e199])]
    advantages, _ = get_rllm_adv_estimator("rloo")(rewards=rewards)
    values = rewards[0].tolist()
    expected = [x - math.fsum(values[:i] + values[i + 1 :]) / 3 for i, x in enumerate(values)]
    np.testing.assert_allclose(advantages[0], expected, rtol=1e-12)


def test_collector_metrics_do_not_overflow_for_1e200_rewards():
    rewards = [1e200, -1e200, 3e199, 7e199]
    groups = [TrajectoryGroup([Trajectory(steps=[Step()], reward=r) for r in rewards], group_id="task:solver")]
    metrics = collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig())
    assert all(math.isfinite(v) for v in metrics.values())
    assert math.isclose(metrics["reward/solver/std"], statistics.pstdev(rewards), rel_tol=1e-12)
    assert math.isclose(metrics["reward/solver/mean"], statistics.fmean(rewards), rel_tol=1e-12)
