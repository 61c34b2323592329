"""``batch/{role}/...`` group diagnostics, pinned to rLLM main's definition.

rLLM defines them in rllm/trainer/algorithms/advantage.py, collect_reward_and_advantage_from_trajectory_groups
(the "Per-group difficulty / learning-signal diagnostics" block): groups of >= 2 trajectories only,
informative when the population std is >= 1e-8, too easy / too hard when a zero-spread group's mean is
>= 1.0 / <= 0.0, numpy-style linear percentiles 10/50/90 of the group means and stds.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.diagnostics import batch_diagnostics, role_batch_diagnostics
from rllm_plugins.segments import offsets_from_sizes


def percentile_by_hand(xs, p):
    xs = sorted(xs)
    rank = p / 100 * (len(xs) - 1)
    lo, hi = math.floor(rank), math.ceil(rank)
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


def diagnostics_by_hand(groups):
    """The definition, one group at a time with plain Python."""
    means, stds = [], []
    informative = easy = hard = 0
    for rewards in groups:
        if len(rewards) < 2:
            continue
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
        means.append(mean)
        stds.append(std)
        if std >= 1e-8:
            informative += 1
        elif mean >= 1.0:
            easy += 1
        elif mean <= 0.0:
            hard += 1
    if not means:
        return {}
    n = len(means)
    out = {"total": n, "informative": informative, "fractions/effective": informative / n, "fractions/too_easy": easy / n, "fractions/too_hard": hard / n}
    for p in (10, 50, 90):
        out[f"group_reward_mean/p{p}"] = percentile_by_hand(means, p)
        out[f"group_reward_std/p{p}"] = percentile_by_hand(stds, p)
    return out


def flat(groups):
    return np.array([r for g in groups for r in g], dtype=np.float64), offsets_from_sizes([len(g) for g in groups])


def traj_group(rewards, group_id):
    return TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1])], reward=r) for r in rewards], group_id=group_id)


MIXED = [[1.0, 1.0, 1.0], [0.0, 0.0], [1.0, 0.0, 0.0, 1.0], [0.5, 0.5], [0.7], [2.0, 2.0], [-1.0, -1.0], [0.2, 0.9, 0.4]]


def test_mixed_groups_match_the_definition():
    got = role_batch_diagnostics(*flat(MIXED))
    want = diagnostics_by_hand(MIXED)
    assert got.keys() == want.keys()
    assert got == pytest.approx(want, rel=1e-12, abs=1e-15)
    # by hand: 7 groups of >= 2; informative [1,0,0,1] and [.2,.9,.4]; easy [1,1,1], [2,2]; hard [0,0], [-1,-1]; [.5,.5] is neither
    assert (got["total"], got["informative"], got["fractions/too_easy"], got["fractions/too_hard"]) == (7, 2, 2 / 7, 2 / 7)


def test_equal_size_groups_take_the_same_definition():
    groups = [[1.0, 1.0], [0.0, 1.0], [0.0, 0.0], [0.25, 0.75]]
    assert role_batch_diagnostics(*flat(groups)) == pytest.approx(diagnostics_by_hand(groups), rel=1e-12, abs=1e-15)


def test_only_groups_of_one_or_empty_give_no_keys():
    assert role_batch_diagnostics(*flat([[1.0], [0.0], []])) == {}
    assert batch_diagnostics({"r": flat([[1.0]])}) == {}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, -0.5]), min_size=0, max_size=6), min_size=1, max_size=12))
def test_random_batches_match_the_definition(groups):
    assert role_batch_diagnostics(*flat(groups)) == pytest.approx(diagnostics_by_hand(groups), rel=1e-9, abs=1e-12)


def test_the_collector_logs_them_per_role_for_rl_groups_only():
    groups = [traj_group([1.0, 1.0], "a:solver"), traj_group([1.0, 0.0], "b:solver"), traj_group([0.0, 0.0, 0.0], "c:judge")]
    precomputed = traj_group([1.0, 0.0], "d:judge")
    precomputed.trajectories[0].steps[0].advantage = 0.3
    metrics = collect_reward_and_advantage_from_trajectory_groups([*groups, precomputed], AlgorithmConfig(use_precomputed_advantage=True))
    solver = {k.removeprefix("batch/solver/"): v for k, v in metrics.items() if k.startswith("batch/solver/")}
    judge = {k.removeprefix("batch/judge/"): v for k, v in metrics.items() if k.startswith("batch/judge/")}
    assert solver == pytest.approx(diagnostics_by_hand([[1.0, 1.0], [1.0, 0.0]]))
    assert judge == pytest.approx(diagnostics_by_hand([[0.0, 0.0, 0.0]]))  # the precomputed group is not counted
    assert judge["fractions/too_hard"] == 1.0 and solver["fractions/effective"] == 0.5


def test_no_diagnostics_when_only_rewards_are_collected():
    metrics = collect_reward_and_advantage_from_trajectory_groups([traj_group([1.0, 0.0], "t")], AlgorithmConfig(), collect_advantage=False)
    assert not any(k.startswith("batch/") for k in metrics)
