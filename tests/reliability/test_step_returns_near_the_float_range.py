"""Step rewards near 1e308: every discounted return float64 can hold is finite (summed rescaled); one it cannot hold names the step.

Before, ``[1e308, 1e308]`` with gamma 0.5 (return 1.5e308, representable) overflowed and failed as "advantage nan".
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.estimators import calculate_step_reinforce_advantages
from rllm_plugins.steps import discounted_returns

BIG = 1e308


def plain_returns(rewards: list[float], gamma: float) -> list[Fraction]:
    out, running = [], Fraction(0)
    for r in reversed(rewards):
        running = Fraction(r) + Fraction(gamma) * running
        out.append(running)
    return out[::-1]


def test_returns_that_fit_float64_are_exact_where_the_plain_sum_overflows():
    rewards, offsets = np.array([BIG, BIG, BIG, 1.0, -BIG, -BIG]), np.array([0, 3, 4, 6])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning either
        got = discounted_returns(rewards, offsets, 0.25)
    want = plain_returns([BIG] * 3, 0.25) + plain_returns([1.0], 0.25) + plain_returns([-BIG, -BIG], 0.25)
    assert got.tolist() == [float(w) for w in want]


def test_step_reinforce_near_the_range_matches_exact_fractions():
    got = calculate_step_reinforce_advantages([[1.0, 0.0]], [[[BIG, BIG], [0.0, 0.0]]], gamma=0.5)[0][0]
    returns = plain_returns([1.0, 1.0], 0.5) + plain_returns([0.0, 0.0], 0.5)  # in units of 1e308: the advantages are scale-free
    mean = sum(returns) / 4
    std = math.sqrt(sum((r - mean) ** 2 for r in returns) / 4)
    want = [float(r - mean) / std for r in returns]  # eps (1e-6) is nothing beside a std of 6e307
    assert np.concatenate(got).tolist() == pytest.approx(want, rel=1e-12)


def test_a_return_beyond_the_range_names_the_trajectory_and_step_through_the_collector():
    group = TrajectoryGroup(
        [
            Trajectory(steps=[Step(reward=0.0), Step(reward=BIG), Step(reward=BIG)], reward=1.0),
            Trajectory(steps=[Step(reward=0.0)], reward=0.0),
        ],
        group_id="task0:agent",
    )
    config = AlgorithmConfig(estimator="step_reinforce", estimator_kwargs={"gamma": 1.0})
    with pytest.raises(ValueError, match=r"the discounted return of trajectory 0 \(in batch order\), step 0 is beyond the float64 range"):
        collect_reward_and_advantage_from_trajectory_groups([group], config)
    assert all(s.advantage is None for t in group.trajectories for s in t.steps)
