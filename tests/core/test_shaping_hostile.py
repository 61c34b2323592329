"""Reward shapers in the core against hostile inputs: a config changed after it was built, named rewards, a trajectory
without steps, a plugin that fails its own way, terms of every numeric dtype, tool tokens the collector does not know,
a running baseline and several roles."""

from __future__ import annotations

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.shaping import register_reward_shaper, shape_rewards, unregister_reward_shaper

DAPO = {"name": "dapo_overlong", "max_length": 8, "buffer": 4, "factor": 0.5}


def trajectory(reward, tokens, prompt=3, steps=1, metadata=None):
    return Trajectory(steps=[Step(prompt_ids=[1] * prompt, response_ids=[7] * tokens) for _ in range(steps)], reward=reward, metadata=metadata or {})


def dapo(length, max_length=8, buffer=4, factor=0.5):
    return min(0.0, factor * ((max_length - buffer) - length) / buffer)


def advantages(groups):
    return [t.steps[0].advantage for g in groups for t in g.trajectories]


# ----------------------------------------------------------------------------------------------------------------------
# numbers
# ----------------------------------------------------------------------------------------------------------------------


def test_a_reward_shapers_list_assigned_after_construction_is_the_one_that_runs():
    """A list assigned to ``reward_shapers`` after the config was built is the one the next call runs (and names)."""
    config = AlgorithmConfig(estimator="rloo", reward_shapers=[DAPO])
    config.reward_shapers = [{"name": "turn_penalty", "coef": 0.5}]
    groups = [TrajectoryGroup([trajectory(1.0, 3), trajectory(1.0, 12, steps=2), trajectory(0.0, 5)], group_id="q:solver")]
    metrics = collect_reward_and_advantage_from_trajectory_groups(groups, config)
    assert "shaping/solver/turn_penalty/mean" in metrics, f"the shapers run: {sorted(k for k in metrics if k.startswith('shaping'))}"
    assert "turn_penalty" in metrics.provenance_line


def test_efficiency_bonus_counts_no_tool_tokens_where_the_collector_knows_none():
    """The collector gives no ``tool_lengths``: ``efficiency_bonus`` counts them 0 (as prime-rl does where a rollout has no
    tool-response metric), so any ``tool_response_weight`` gives the numbers of ``tool_response_weight=0``."""

    def run(weight):
        groups = [TrajectoryGroup([trajectory(1.0, 3), trajectory(1.0, 5), trajectory(0.0, 5)], group_id="q:solver")]
        collect_reward_and_advantage_from_trajectory_groups(
            groups, AlgorithmConfig(estimator="rloo", reward_shapers=[{"name": "efficiency_bonus", "tool_response_weight": weight}])
        )
        return advantages(groups)

    assert run(5.0) == run(0.0)
    assert run(0.0) != pytest.approx([0.5, 0.5, -1.0])  # the bonus moved the two correct answers apart


# ----------------------------------------------------------------------------------------------------------------------
# failures
# ----------------------------------------------------------------------------------------------------------------------


def test_named_rewards_under_sum_then_normalize_are_shaped_as_their_weighted_sum():
    """Named rewards under ``sum_then_normalize`` (the default) are shaped as their weighted sum: the numbers of one reward per
    trajectory holding that sum."""

    def groups(named):
        rewards = [({"a": 1.0, "b": 0.5}, 3), ({"a": 0.0, "b": 0.5}, 12), ({"a": 1.0, "b": 0.0}, 6)]
        made = [trajectory(None, n, metadata={"rewards": r}) if named else trajectory(r["a"] + r["b"], n) for r, n in rewards]
        return [TrajectoryGroup(made, group_id="q:solver")]

    summed = groups(named=False)
    collect_reward_and_advantage_from_trajectory_groups(summed, AlgorithmConfig(estimator="rloo", reward_shapers=[DAPO]))
    named = groups(named=True)
    collect_reward_and_advantage_from_trajectory_groups(named, AlgorithmConfig(estimator="rloo", reward_shapers=[DAPO]))
    assert advantages(named) == pytest.approx(advantages(summed), abs=1e-12)


def test_a_trajectory_without_steps_counts_no_prompt_tokens_and_the_role_keeps_its_prompts():
    """A trajectory without steps counts 0 prompt tokens; the others keep theirs (``length_penalty`` reads them by default)."""
    good = TrajectoryGroup([trajectory(1.0, 3), trajectory(0.0, 5)], group_id="q:solver")
    failed = TrajectoryGroup([trajectory(1.0, 4), Trajectory(steps=[], reward=0.0)], group_id="r:solver")
    config = AlgorithmConfig(estimator="rloo", reward_shapers=["length_penalty"])
    collect_reward_and_advantage_from_trajectory_groups([good], config)
    metrics = collect_reward_and_advantage_from_trajectory_groups([good, failed], config)
    assert metrics["shaping/solver/length_penalty/min"] < 0


def test_a_plugin_shaper_raising_any_exception_is_named():
    """Whatever a shaper raises is reported naming it and the role."""

    @register_reward_shaper("test_index_error")
    def broken(rewards, *, offsets, cut: int = 0):
        return np.zeros_like(rewards) if rewards.size <= 4 else np.zeros(1)[np.arange(rewards.size)]

    try:
        with pytest.raises(ValueError, match="test_index_error"):
            shape_rewards(np.zeros(6), ["test_index_error"], offsets=np.array([0, 3, 6]))
    finally:
        unregister_reward_shaper("test_index_error")


# ----------------------------------------------------------------------------------------------------------------------
# what docs/shaping.md says
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int64, np.bool_, np.float32])
def test_integer_bool_and_float32_terms_are_exact_and_accepted(dtype):
    """Integers and bools hold their values exactly (a bool term adds 1 per True unit); float16 and bfloat16 are refused."""

    @register_reward_shaper("test_narrow")
    def narrow(rewards):
        return np.ones(rewards.size, dtype=dtype)

    try:
        shaped, _, _ = shape_rewards(np.zeros(3), ["test_narrow"], offsets=np.array([0, 3]))
        assert shaped.tolist() == [1.0, 1.0, 1.0]
    finally:
        unregister_reward_shaper("test_narrow")


# ----------------------------------------------------------------------------------------------------------------------
# state and roles
# ----------------------------------------------------------------------------------------------------------------------


def test_rae_state_sees_the_shaped_rewards_in_the_collector():
    """a stateful estimator's running baseline is fed the shaped rewards (the list form gets ``rewards`` by group
    shaped), so three calls with shapers equal three calls without them on rewards carrying the terms, state included."""
    lengths, rewards = [3, 12, 5], [1.0, 1.0, 0.0]

    def groups(with_terms):
        extra = [dapo(n) for n in lengths] if with_terms else [0.0] * 3
        made = [Trajectory(steps=[Step(prompt_ids=[1], response_ids=[7] * n)], reward=r + x) for n, r, x in zip(lengths, rewards, extra, strict=True)]
        return [TrajectoryGroup(made, group_id="t1:solver")]

    shaped, plain = AlgorithmConfig(estimator="rae", reward_shapers=[DAPO]), AlgorithmConfig(estimator="rae")
    for _ in range(3):
        a, b = groups(False), groups(True)
        collect_reward_and_advantage_from_trajectory_groups(a, shaped)
        collect_reward_and_advantage_from_trajectory_groups(b, plain)
        assert advantages(a) == advantages(b)
    assert shaped.state_dict() == plain.state_dict()


def test_each_role_gets_its_own_shaping_metrics_under_estimator_map():
    """with ``estimator_map`` the shapers run once per role, on that role's groups only, and log under its name."""
    groups = [
        TrajectoryGroup([trajectory(1.0, 3), trajectory(1.0, 12, steps=3)], group_id="q:solver"),
        TrajectoryGroup([trajectory(1.0, 3), trajectory(0.0, 3)], group_id="q:judge"),
    ]
    config = AlgorithmConfig(estimator="rloo", estimator_map={"judge": "grpo"}, reward_shapers=[{"name": "turn_penalty", "coef": 0.5}])
    metrics = collect_reward_and_advantage_from_trajectory_groups(groups, config)
    assert metrics["shaping/solver/turn_penalty/min"] == -1.5
    assert metrics["shaping/judge/turn_penalty/min"] == -0.5
