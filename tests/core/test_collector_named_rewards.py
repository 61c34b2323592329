"""The collector with several named rewards per trajectory (``Trajectory.metadata["rewards"]``) and ``multi_objective_aggregation``."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from rllm_plugins import (
    AlgorithmConfig,
    Step,
    Trajectory,
    TrajectoryGroup,
    collect_reward_and_advantage_from_trajectory_groups,
    register_rllm_adv_estimator,
    unregister_rllm_adv_estimator,
)


def group(group_id: str, named: list[dict[str, float | None]], reward: float | None = None) -> TrajectoryGroup:
    trajectories = [Trajectory(steps=[Step(response_ids=[1, 2]), Step(response_ids=[3])], reward=reward, metadata={"rewards": r}) for r in named]
    return TrajectoryGroup(trajectories, group_id=group_id)


def advantages(groups: list[TrajectoryGroup]) -> list[list[float]]:
    out = []
    for g in groups:
        values = [t.steps[0].advantage for t in g.trajectories]
        assert all(s.advantage == v for t, v in zip(g.trajectories, values, strict=True) for s in t.steps)  # broadcast
        out.append(values)
    return out


def rloo_by_hand(values: list[float]) -> list[float]:
    n = len(values)
    return list(values) if n == 1 else [v - (sum(values) - v) / (n - 1) for v in values]


def gdpo_by_hand(named_groups: list[list[dict[str, float | None]]], weights: dict[str, float], estimator=rloo_by_hand) -> list[list[float]]:
    names = list(dict.fromkeys(n for g in named_groups for r in g for n in r))
    totals = [[0.0] * len(g) for g in named_groups]
    for name in names:
        for g, members in enumerate(named_groups):
            keep = [i for i, r in enumerate(members) if r.get(name) is not None]
            if keep:
                for i, a in zip(keep, estimator([members[i][name] for i in keep]), strict=True):
                    totals[g][i] += weights.get(name, 1.0) * a
    flat = [t for g in totals for t in g]
    mean, std = statistics.fmean(flat), statistics.stdev(flat)
    return [[(t - mean) / (std + 1e-6) for t in g] for g in totals]


NAMED = [
    [{"correct": 1.0, "format": 1.0}, {"correct": 0.0, "format": None}, {"correct": 1.0, "format": 0.0}],
    [{"correct": 0.0, "format": 1.0}, {"correct": 0.0, "format": 0.5}],
    [{"correct": 1.0, "format": 0.0}],
]


def test_normalize_then_sum_over_named_rewards_matches_by_hand():
    groups = [group(f"t{i}:solver", g) for i, g in enumerate(NAMED)]
    config = AlgorithmConfig(estimator="rloo", multi_objective_aggregation="normalize_then_sum", reward_weights={"format": 0.5})
    collect_reward_and_advantage_from_trajectory_groups(groups, config)
    expected = gdpo_by_hand(NAMED, {"format": 0.5})
    for ours, theirs in zip(advantages(groups), expected, strict=True):
        np.testing.assert_allclose(ours, theirs, atol=1e-9)


def test_sum_then_normalize_over_named_rewards_is_the_estimator_on_the_weighted_sum():
    groups = [group(f"t{i}", g, reward=99.0) for i, g in enumerate(NAMED)]  # Trajectory.reward gives way to the named rewards
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="rloo", reward_weights={"correct": 2.0}))
    sums = [[2.0 * r["correct"] + (r["format"] or 0.0) for r in g] for g in NAMED]
    for ours, values in zip(advantages(groups), sums, strict=True):
        np.testing.assert_allclose(ours, rloo_by_hand(values), atol=1e-12)


def test_each_role_is_whitened_on_its_own():
    solver = [group("a:solver", NAMED[0]), group("b:solver", NAMED[1])]
    judge = [group("c:judge", [{"x": 1.0}, {"x": 0.0}, {"x": 3.0}])]
    config = AlgorithmConfig(estimator="rloo", multi_objective_aggregation="normalize_then_sum")
    collect_reward_and_advantage_from_trajectory_groups([solver[0], judge[0], solver[1]], config)
    for ours, theirs in zip(advantages(solver), gdpo_by_hand(NAMED[:2], {}), strict=True):
        np.testing.assert_allclose(ours, theirs, atol=1e-9)
    np.testing.assert_allclose(advantages(judge)[0], gdpo_by_hand([[{"x": 1.0}, {"x": 0.0}, {"x": 3.0}]], {})[0], atol=1e-9)


def test_normalize_then_sum_with_one_reward_whitens_the_estimator_over_the_role():
    by_group = [[1.0, 0.0, 0.0], [2.0, 1.0]]
    groups = [TrajectoryGroup([Trajectory(steps=[Step()], reward=r) for r in rewards], group_id=f"t{i}") for i, rewards in enumerate(by_group)]
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="rloo", multi_objective_aggregation="normalize_then_sum"))
    expected = gdpo_by_hand([[{"r": 1.0}, {"r": 0.0}, {"r": 0.0}], [{"r": 2.0}, {"r": 1.0}]], {})
    for ours, theirs in zip(advantages(groups), expected, strict=True):
        np.testing.assert_allclose(ours, theirs, atol=1e-9)


def test_named_reward_metrics_per_role_and_name():
    groups = [group(f"t{i}:solver", g) for i, g in enumerate(NAMED)]
    metrics = collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="rloo", reward_weights={"format": 0.5}))
    formats = [r["format"] for g in NAMED for r in g if r["format"] is not None]
    assert metrics["reward/solver/format/mean"] == pytest.approx(statistics.fmean(formats))
    assert metrics["reward/solver/format/std"] == pytest.approx(statistics.pstdev(formats))
    assert metrics["reward/solver/correct/max"] == 1.0 and metrics["reward/solver/correct/min"] == 0.0
    combined = [r["correct"] + 0.5 * (r["format"] or 0.0) for g in NAMED for r in g]
    assert metrics["reward/solver/mean"] == pytest.approx(statistics.fmean(combined))


def test_a_list_form_estimator_of_the_first_generation_works_per_reward():
    def centred(rewards, norm_adv_by_std_in_grpo=True, episilon=1e-6, **kwargs):
        advantages = [np.asarray(r, dtype=float) - np.mean(r) for r in rewards]
        return advantages, advantages

    register_rllm_adv_estimator("centred_for_named_rewards")(centred)
    try:
        groups = [group(f"t{i}", g) for i, g in enumerate(NAMED[:2])]
        config = AlgorithmConfig(estimator="centred_for_named_rewards", multi_objective_aggregation="normalize_then_sum")
        collect_reward_and_advantage_from_trajectory_groups(groups, config)
        expected = gdpo_by_hand(NAMED[:2], {}, estimator=lambda v: [x - statistics.fmean(v) for x in v])
        for ours, theirs in zip(advantages(groups), expected, strict=True):
            np.testing.assert_allclose(ours, theirs, atol=1e-9)
    finally:
        unregister_rllm_adv_estimator("centred_for_named_rewards")


@pytest.mark.parametrize(
    ("named", "message"),
    [
        ([{"a": 1.0}, None], r"trajectory 1: metadata\['rewards'\] is missing while other trajectories of the group have named rewards"),
        ([{"a": 1.0}, {"a": None}], r"trajectory 1: every named reward is None"),
        ([{"a": 1.0}, {"a": math.inf}], r"trajectory 1: named reward 'a' must be a finite number or None, got float inf"),
        ([{"a": 1.0}, {"a": "1"}], r"trajectory 1: named reward 'a' must be a finite number or None, got str '1'"),
        ([{"a": 1.0}, {}], r"trajectory 1: metadata\['rewards'\] must be a non-empty mapping"),
    ],
)
def test_bad_named_rewards_say_where(named, message):
    trajectories = [Trajectory(steps=[Step()], reward=0.0, metadata=None if r is None else {"rewards": r}) for r in named]
    groups = [TrajectoryGroup(trajectories, group_id="task:solver")]
    with pytest.raises(ValueError, match=r"role 'solver', group 0 \(group_id 'task:solver'\), " + message):
        collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig())
    assert all(s.advantage is None for t in trajectories for s in t.steps)


def test_a_role_mixing_named_and_single_rewards_is_refused():
    plain = TrajectoryGroup([Trajectory(steps=[Step()], reward=1.0)], group_id="b:solver")
    with pytest.raises(ValueError, match=r"group 1 \(group_id 'b:solver'\): no named rewards"):
        collect_reward_and_advantage_from_trajectory_groups([group("a:solver", NAMED[0]), plain], AlgorithmConfig())


def test_a_weight_for_a_reward_no_trajectory_carries_is_a_typo():
    with pytest.raises(ValueError, match=r"reward_weights names \['formatt'\], which no trajectory carries"):
        collect_reward_and_advantage_from_trajectory_groups([group("a", NAMED[0])], AlgorithmConfig(reward_weights={"formatt": 2.0}))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"multi_objective_aggregation": "gdpo"}, "AlgorithmConfig.multi_objective_aggregation must be one of"),
        ({"reward_weights": {"a": "2"}}, r"reward_weights\['a'\] must be a finite number"),
        ({"reward_weights": {"a": math.nan}}, r"reward_weights\['a'\] must be a finite number"),
        ({"reward_weights": [1.0]}, "reward_weights must map reward names to weights"),
    ],
)
def test_bad_options_fail_at_config_time(options, message):
    with pytest.raises(ValueError, match=message):
        AlgorithmConfig(**options)


def test_from_config_reads_the_options():
    config = AlgorithmConfig.from_config({"rllm": {"algorithm": {"multi_objective_aggregation": "normalize_then_sum", "reward_weights": {"a": 2}}}})
    assert (config.multi_objective_aggregation, config.reward_weights) == ("normalize_then_sum", {"a": 2.0})
