"""``minus_length_weighted_mean`` (rLLM PR #757, outcome mode): r minus the role's mean reward per response token."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups


def trajectory(reward: float, *step_lengths: int, metadata: dict | None = None) -> Trajectory:
    return Trajectory(steps=[Step(response_ids=[7] * n, metadata=metadata) for n in step_lengths], reward=reward)


def test_the_prs_outcome_example():
    group = TrajectoryGroup([trajectory(0.9, 100), trajectory(0.0, 50)], group_id="g")
    collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(estimator="minus_length_weighted_mean"))
    # baseline (0.9 * 100 + 0 * 50) / 150 = 0.6
    assert [t.steps[0].advantage for t in group.trajectories] == pytest.approx([0.3, -0.6], abs=1e-12)


def test_one_baseline_for_every_group_of_a_role_and_one_per_role():
    solver = [
        TrajectoryGroup([trajectory(1.0, 2, 1), trajectory(0.0, 4)], group_id="q1:solver"),
        TrajectoryGroup([trajectory(0.5, 5)], group_id="q2:solver"),
    ]
    judge = [TrajectoryGroup([trajectory(1.0, 1), trajectory(3.0, 3)], group_id="q1:judge")]
    collect_reward_and_advantage_from_trajectory_groups([*solver, *judge], AlgorithmConfig(estimator="minus_length_weighted_mean"))
    solver_baseline = Fraction(1 * 3 + 0 * 4 + Fraction(1, 2) * 5, 3 + 4 + 5)  # lengths summed over each trajectory's steps
    judge_baseline = Fraction(1 * 1 + 3 * 3, 1 + 3)
    got = [[s.advantage for s in t.steps] for g in solver for t in g.trajectories]
    want = [[1 - solver_baseline] * 2, [0 - solver_baseline], [Fraction(1, 2) - solver_baseline]]
    assert got == [[pytest.approx(float(w), abs=1e-12) for w in ws] for ws in want]
    assert [t.steps[0].advantage for t in judge[0].trajectories] == pytest.approx([float(1 - judge_baseline), float(3 - judge_baseline)], abs=1e-12)


def test_a_role_without_response_tokens_has_baseline_zero():
    group = TrajectoryGroup([trajectory(2.0, 0), trajectory(1.0, 0)], group_id="g")
    collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(estimator="minus_length_weighted_mean"))
    assert [t.steps[0].advantage for t in group.trajectories] == [2.0, 1.0]


def test_the_token_mode_is_refused_naming_the_step():
    groups = [TrajectoryGroup([trajectory(1.0, 2), trajectory(0.0, 1, 2, metadata={"per_token_rewards": [0.5, 0.5]})], group_id="q:solver")]
    match = r"group 0 \('q:solver'\), trajectory 1, step 0 carries metadata\['per_token_rewards'\]: the token mode of rLLM PR #757 is not supported"
    with pytest.raises(ValueError, match=match):
        collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="minus_length_weighted_mean"))
    assert groups[0].trajectories[0].steps[0].advantage is None


def test_by_name_from_an_rllm_config_node():
    config = AlgorithmConfig.from_config({"adv_estimator": "minus_length_weighted_mean"})
    assert config.estimator == "minus_length_weighted_mean" and config.estimator_name("all_groups") == "minus_length_weighted_mean"


def test_lengths_must_match_the_rewards():
    from rllm_plugins.estimators import minus_length_weighted_mean

    with pytest.raises(ValueError, match=r"lengths has shape \(3,\), rewards have \(2,\)"):
        minus_length_weighted_mean(np.array([1.0, 0.0]), np.array([0, 2]), lengths=np.array([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="needs the response length of every trajectory"):
        minus_length_weighted_mean(np.array([1.0, 0.0]), np.array([0, 2]))
