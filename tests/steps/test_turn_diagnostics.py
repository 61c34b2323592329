"""Per-turn diagnostics: mean advantage and reward by turn index, from the collector (``turn/{role}/...``)."""

from __future__ import annotations

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.steps.diagnostics import turn_metrics


def test_the_collector_reports_means_by_turn_index_over_the_trajectories_that_reach_it():
    rng = np.random.default_rng(0)
    groups = []
    for task in range(4):
        trajectories = []
        for _ in range(3):
            steps = [Step(observation=f"s{int(rng.integers(0, 2))}", reward=float(rng.integers(0, 2))) for _ in range(int(rng.integers(1, 6)))]
            trajectories.append(Trajectory(steps=steps, reward=sum(s.reward for s in steps)))
        groups.append(TrajectoryGroup(trajectories, group_id=f"task{task}:agent"))
    metrics = collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="gigpo"))
    by_turn: dict[object, list[tuple[float, float]]] = {}
    for group in groups:
        for traj in group.trajectories:
            for t, step in enumerate(traj.steps):
                by_turn.setdefault(t, []).append((step.advantage, step.reward))
            by_turn.setdefault("last", []).append((traj.steps[-1].advantage, traj.steps[-1].reward))
    for t in (0, 1, 2, "last"):
        assert metrics[f"turn/agent/{t}/advantage_mean"] == pytest.approx(np.mean([a for a, _ in by_turn[t]]))
        assert metrics[f"turn/agent/{t}/reward_mean"] == pytest.approx(np.mean([r for _, r in by_turn[t]]))
    assert "turn/agent/3/advantage_mean" not in metrics  # the first three turn indices only
    assert metrics["turn/agent/count_mean"] == pytest.approx(np.mean([len(t.steps) for g in groups for t in g.trajectories]))


def test_only_turn_indices_some_trajectory_reaches_and_nothing_without_turns():
    assert set(turn_metrics(np.array([1.0, 2.0]), np.array([0.0, 1.0]), np.array([0, 1, 2]))) == {
        "turn/0/advantage_mean",
        "turn/0/reward_mean",
        "turn/last/advantage_mean",
        "turn/last/reward_mean",
        "turn/count_mean",
    }
    assert turn_metrics(np.zeros(0), np.zeros(0), np.array([0, 0])) == {}
    # a trajectory without turns (a padding row) counts nowhere
    assert turn_metrics(np.array([4.0]), np.array([1.0]), np.array([0, 0, 1]))["turn/count_mean"] == 1.0
