"""The built-in ``whiten`` transform against a plain re-statement, alone and after the collector's estimator."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.transforms import apply_transforms


def plain(values, std=True, eps=1e-8):
    mean = sum(values) / len(values)
    spread = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return [(v - mean) / (spread + eps) if std else v - mean for v in values]


@pytest.mark.parametrize("values", [[0.5], [1.0, -1.0], [3.0, 3.0, 3.0], [0.25, -2.0, 7.5, 1e-3, 0.0]])
@pytest.mark.parametrize("std", [True, False])
def test_whiten_is_the_batch_z_score(values, std):
    got, metrics = apply_transforms(np.array(values), [("whiten", {"std": std})])
    np.testing.assert_allclose(got, plain(values, std), rtol=1e-12, atol=1e-12)
    assert metrics["transform/all_groups/whiten/mean"] == pytest.approx(0.0, abs=1e-12)


def test_an_empty_batch_stays_empty_and_bad_options_are_named():
    got, _ = apply_transforms(np.zeros(0), ["whiten"])
    assert got.shape == (0,)
    for options, what in (({"std": "yes"}, "'std' must be a bool"), ({"eps": 0.0}, "'eps' must be a finite number > 0"), ({"eps": float("nan")}, "'eps'")):
        with pytest.raises(ValueError, match=what):
            AlgorithmConfig(estimator="grpo", advantage_transforms=[("whiten", options)])


def test_after_grpo_in_the_collector_the_units_are_every_trajectory_of_the_role():
    rewards = {"t0:solver": [1.0, 0.0, 0.0], "t1:solver": [0.5, 1.0], "t2:judge": [1.0, 0.0]}
    groups = [TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1])], reward=r) for r in rs], group_id=g) for g, rs in rewards.items()]
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="grpo", advantage_transforms=["whiten"]))

    def grpo(rs):
        mean = sum(rs) / len(rs)
        std = math.sqrt(sum((r - mean) ** 2 for r in rs) / len(rs))
        return [(r - mean) / (std + 1e-6) for r in rs]

    solver = plain(grpo(rewards["t0:solver"]) + grpo(rewards["t1:solver"]))  # one role: both groups at once
    judge = plain(grpo(rewards["t2:judge"]))
    got = [t.steps[0].advantage for g in groups for t in g.trajectories]
    np.testing.assert_allclose(got, solver + judge, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("magnitude", [1e-300, 1e150, 1e200, 1e307])
def test_whiten_is_the_same_z_score_at_any_scale(magnitude):
    base = [0.25, -2.0, 7.5, 1e-3, 0.0]
    got, _ = apply_transforms(np.array(base) * magnitude, ["whiten"])
    np.testing.assert_allclose(got, plain(base, eps=1e-8 / magnitude), rtol=1e-9, atol=1e-12)
