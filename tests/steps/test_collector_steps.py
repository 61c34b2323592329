"""The collector with step-level estimators: one advantage per step, roles mixing levels, bad input refused before any write."""

from __future__ import annotations

import statistics
import warnings

import numpy as np
import pytest

from rllm_plugins import AdvEstimatorSpec, AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.estimators import calculate_step_reinforce_advantages
from rllm_plugins.registry import register_rllm_adv_estimator, unregister_rllm_adv_estimator
from rllm_plugins.testing import check_estimator

EPS = 1e-6


def agent_groups():
    """Two tasks; in 'task0' the second trajectory reaches the first one's state 'door' from another history."""
    return [
        TrajectoryGroup(
            [
                Trajectory(steps=[Step(reward=0.0, observation="start"), Step(reward=1.0, observation="door")], reward=1.0),
                Trajectory(
                    steps=[Step(reward=0.0, observation="start"), Step(reward=0.0, observation="hall"), Step(reward=0.0, observation="door")], reward=0.0
                ),
            ],
            group_id="task0:agent",
        ),
        TrajectoryGroup(
            [Trajectory(steps=[Step(reward=0.0, observation="door")], reward=1.0), Trajectory(steps=[Step(reward=0.0, observation="door")], reward=1.0)],
            group_id="task1:agent",
        ),
    ]


def advantages(groups):
    return [[[s.advantage for s in t.steps] for t in g.trajectories] for g in groups]


def test_each_step_gets_its_own_advantage_from_its_reward_and_anchor():
    groups = agent_groups()
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="gigpo"))
    a_e = 0.5 / (0.5 + EPS)
    # task0 returns (gamma 1): [1, 1] and [0, 0, 0]; 'start' = {1, 0}, 'door' = {1, 0}, 'hall' alone
    z = 0.5 / (0.5 + EPS)
    assert advantages(groups)[0] == [[pytest.approx(a_e + z), pytest.approx(a_e + z)], [pytest.approx(-a_e - z), pytest.approx(-a_e), pytest.approx(-a_e - z)]]
    # task1: equal outcomes and equal returns; 'door' of task0 is another task's state and does not join
    assert advantages(groups)[1] == [[0.0], [0.0]]
    assert all(isinstance(a, float) for g in advantages(groups) for t in g for a in t)


def test_anchor_state_in_metadata_overrides_the_observation():
    groups = agent_groups()
    groups[0].trajectories[1].steps[2].metadata = {"anchor_state": "elsewhere"}
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="gigpo"))
    a_e = 0.5 / (0.5 + EPS)
    assert advantages(groups)[0][0][1] == pytest.approx(a_e)  # 'door' is now alone in task0
    assert advantages(groups)[0][1][2] == pytest.approx(-a_e)


def test_roles_mix_levels_through_the_estimator_map_and_metrics_count_steps():
    groups = [
        *agent_groups(),
        TrajectoryGroup([Trajectory(steps=[Step(), Step()], reward=1.0), Trajectory(steps=[Step()], reward=0.0)], group_id="task0:judge"),
    ]
    config = AlgorithmConfig(estimator_map={"agent": "gigpo"}, stepwise_advantage_mode="per_step")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics = collect_reward_and_advantage_from_trajectory_groups(groups, config)
    assert [str(w.message).split(":")[0] for w in caught] == ["role 'judge', estimator 'grpo' (outcome-level)"]  # per_step is meant for 'agent'
    judge = advantages(groups)[2]
    assert judge == [[0.5 / (0.5 + EPS)] * 2, [-0.5 / (0.5 + EPS)]]  # broadcast
    agent_steps = [a for g in advantages(groups)[:2] for t in g for a in t]
    assert metrics["advantage/agent/mean"] == pytest.approx(statistics.fmean(agent_steps))  # 7 steps, not 4 trajectories
    assert metrics["advantage/agent/fraction_zero"] == pytest.approx(2 / 7)  # the two steps of task1
    assert metrics["advantage/judge/mean"] == pytest.approx(0.0)
    assert metrics["batch/agent/anchor_groups/mean_size"] == pytest.approx(7 / 4)  # start, door, hall | door
    assert metrics["batch/agent/anchor_groups/fraction_singleton_steps"] == pytest.approx(1 / 7)


def test_step_reinforce_needs_no_anchors():
    groups = agent_groups()
    for g in groups:
        for t in g.trajectories:
            for s in t.steps:
                s.observation = None
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="step_reinforce", estimator_kwargs={"gamma": 0.5}))
    want, _ = calculate_step_reinforce_advantages(
        [np.array([1.0, 0.0]), np.array([1.0, 1.0])], [[np.array([0.0, 1.0]), np.array([0.0, 0.0, 0.0])], [np.array([0.0]), np.array([0.0])]], gamma=0.5
    )
    assert advantages(groups) == [[t.tolist() for t in g] for g in want]
    returns = [0.5, 1.0, 0.0, 0.0, 0.0]
    z = [(r - statistics.fmean(returns)) / (statistics.pstdev(returns) + EPS) for r in returns]
    assert advantages(groups)[0] == [pytest.approx(z[:2]), pytest.approx(z[2:])]


def snapshot(groups):
    return advantages(groups)


@pytest.mark.parametrize(
    ("edit", "config", "message"),
    [
        (
            lambda g: setattr(g[1].trajectories[1].steps[0], "observation", ["door"]),
            AlgorithmConfig(estimator="gigpo"),
            r"role 'agent', group 1 \(group_id 'task1:agent'\), trajectory 1, step 0: anchor state list \['door'\] is unhashable; give a hashable one",
        ),
        (
            lambda g: setattr(g[0].trajectories[1].steps[1], "observation", None),
            AlgorithmConfig(estimator="gigpo"),
            r"role 'agent', group 0 \(group_id 'task0:agent'\), trajectory 1, step 1: no anchor state; step-level estimator 'gigpo' .* needs one per step: "
            r"set Step.observation or Step.metadata\['anchor_state'\]",
        ),
        (
            lambda g: setattr(g[0].trajectories[0].steps[1], "reward", float("nan")),
            AlgorithmConfig(estimator="gigpo"),
            r"group 0 \(group_id 'task0:agent'\), trajectory 0, step 1: step reward must be a finite number, got float nan",
        ),
        (
            lambda g: setattr(g[0].trajectories[0].steps[1], "reward", "1"),
            AlgorithmConfig(estimator="step_reinforce"),
            r"trajectory 0, step 1: step reward must be a finite number, got str '1'",
        ),
        (
            lambda g: setattr(g[1].trajectories[0], "steps", []),
            AlgorithmConfig(estimator="step_reinforce"),
            r"role 'agent', group 1 \(group_id 'task1:agent'\), trajectory 0: the trajectory has no steps; step-level estimator 'step_reinforce'",
        ),
        (
            lambda g: None,
            AlgorithmConfig(estimator="gigpo", estimator_kwargs={"gamma": 1.5}),
            r"AlgorithmConfig.estimator_kwargs: estimator 'gigpo': gamma .* \[0, 1\]",
        ),
        (
            lambda g: None,
            AlgorithmConfig(estimator="gigpo", estimator_kwargs={"step_advantage_weight": 1.0}),
            r"unknown option 'step_advantage_weight' for estimator 'gigpo' .* Did you mean 'step_advantage_w'\?",
        ),
        (
            lambda g: None,
            AlgorithmConfig(estimator="gigpo", estimator_kwargs={"gamma": "0.9"}),
            r"option 'gamma' of estimator 'gigpo' must be a number, got str '0.9'",
        ),
        (
            lambda g: None,
            AlgorithmConfig(estimator="gigpo", multi_objective_aggregation="normalize_then_sum"),
            r"multi_objective_aggregation='normalize_then_sum' combines outcome advantages and has no per-step form",
        ),
    ],
)
def test_bad_input_is_a_value_error_naming_where_and_nothing_is_written(edit, config, message):
    groups = agent_groups()
    edit(groups)
    groups.append(TrajectoryGroup([Trajectory(steps=[Step()], reward=1.0), Trajectory(steps=[Step()], reward=0.0)], group_id="t:judge"))
    before = snapshot(groups)
    with pytest.raises(ValueError, match=message):
        collect_reward_and_advantage_from_trajectory_groups(groups, config)
    assert snapshot(groups) == before


def test_a_step_level_plugin_written_as_a_list_form_works_in_the_collector_and_keeps_the_contract():
    def last_step_only(rewards, step_rewards, anchor_states=None, **_):
        """Credit only the last step: the outcome minus the group mean."""
        out = [
            [np.r_[np.zeros(len(s) - 1), [r - np.mean(group_rewards)]] for r, s in zip(group_rewards, group_steps, strict=False)]
            for group_rewards, group_steps in zip(rewards, step_rewards, strict=False)
        ]
        return out, out

    register_rllm_adv_estimator("last_step_only", level="step")(last_step_only)
    try:
        groups = agent_groups()
        collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="last_step_only"))
        assert advantages(groups)[0] == [[0.0, 0.5], [0.0, 0.0, -0.5]]
        assert check_estimator("last_step_only").ok
    finally:
        unregister_rllm_adv_estimator("last_step_only")


def test_a_list_form_plugin_pooling_by_anchor_over_the_batch_is_right_because_ids_never_cross_task_groups():
    def pooled(rewards, step_rewards, anchor_states=None, **_):
        """Anchor groups over the whole batch: right, as the ids it receives never repeat across task groups."""
        flat = [(a, r) for g, ga in zip(step_rewards, anchor_states, strict=False) for t, ta in zip(g, ga, strict=False) for a, r in zip(ta, t, strict=False)]
        means = {a: np.mean([r for b, r in flat if b == a]) for a, _ in flat}
        out = [
            [np.array([r - means[a] for a, r in zip(ta, t, strict=False)]) for t, ta in zip(g, ga, strict=False)]
            for g, ga in zip(step_rewards, anchor_states, strict=False)
        ]
        return out, out

    assert check_estimator(AdvEstimatorSpec("pooled", fn=pooled, level="step", needs_anchors=True)).ok


def test_the_contract_checker_catches_a_step_plugin_that_reads_anchor_ids_as_numbers():
    def weighted(rewards, step_rewards, anchor_states=None, **_):
        """Wrong: scales each step by its anchor id, a label."""
        out = [[np.asarray(t) * (1 + np.asarray(ta)) for t, ta in zip(g, ga, strict=True)] for g, ga in zip(step_rewards, anchor_states, strict=True)]
        return out, out

    report = check_estimator(AdvEstimatorSpec("weighted", fn=weighted, level="step", needs_anchors=True))
    assert report.verdicts["anchor_ids_are_labels"] == "FAIL"
    assert report.verdicts["valid_output"] == "pass"


def test_the_contract_checker_catches_a_step_plugin_returning_one_value_per_trajectory():
    def per_trajectory(rewards, step_rewards, anchor_states=None, **_):
        out = [[np.array([r]) for r in g] for g in rewards]
        return out, out

    report = check_estimator(AdvEstimatorSpec("per_trajectory", fn=per_trajectory, level="step"))
    assert not report.ok
    assert report.verdicts["valid_output"] == "FAIL"
    assert "(step-level)" in str(report)


def test_spec_level_is_validated():
    with pytest.raises(ValueError, match=r"estimator 'x': level must be one of \['outcome', 'step'\], got 'token'"):
        AdvEstimatorSpec("x", fn=lambda rewards, **_: (rewards, rewards), level="token")
    with pytest.raises(ValueError, match="needs_anchors=True needs level='step'"):
        AdvEstimatorSpec("x", fn=lambda rewards, **_: (rewards, rewards), needs_anchors=True)


def test_a_trajectory_with_only_an_outcome_has_it_on_its_last_step_as_in_verl_and_trl():
    """Before: step rewards 0, so gigpo = grpo with a warning; verl (outcome on the last token) and TRL (no turn_rewards) differed."""

    def groups(step_rewards):
        trajectories = [
            Trajectory(steps=[Step(observation="a", reward=r) for r in rewards], reward=outcome)
            for rewards, outcome in zip(step_rewards, [1.0, 0.0, 0.5], strict=True)
        ]
        return [TrajectoryGroup(trajectories, group_id="t:agent")]

    only_outcomes = groups([[0.0, 0.0], [0.0], [0.0, 0.0, 0.0]])
    on_last_steps = groups([[0.0, 1.0], [0.0], [0.0, 0.0, 0.5]])
    config = AlgorithmConfig(estimator="gigpo", estimator_kwargs={"gamma": 0.9})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        collect_reward_and_advantage_from_trajectory_groups(only_outcomes, config)
    collect_reward_and_advantage_from_trajectory_groups(on_last_steps, config)
    got = [[s.advantage for s in t.steps] for t in only_outcomes[0].trajectories]
    assert got == [[s.advantage for s in t.steps] for t in on_last_steps[0].trajectories]
    assert [s.reward for s in only_outcomes[0].trajectories[0].steps] == [0.0, 0.0]  # the steps themselves are not changed


def test_steps_that_carry_a_reward_are_read_as_given():
    given = [
        TrajectoryGroup(
            [Trajectory(steps=[Step(observation="a", reward=1.0), Step(observation="b")], reward=5.0), Trajectory(steps=[Step(observation="a")], reward=0.0)],
            group_id="t:agent",
        )
    ]
    moved = [
        TrajectoryGroup(
            [
                Trajectory(steps=[Step(observation="a", reward=1.0), Step(observation="b", reward=5.0)], reward=5.0),
                Trajectory(steps=[Step(observation="a")], reward=0.0),
            ],
            group_id="t:agent",
        )
    ]
    config = AlgorithmConfig(estimator="step_reinforce")
    collect_reward_and_advantage_from_trajectory_groups(given, config)
    collect_reward_and_advantage_from_trajectory_groups(moved, config)
    assert [s.advantage for s in given[0].trajectories[0].steps] != [s.advantage for s in moved[0].trajectories[0].steps]


def test_the_contract_checker_calls_an_estimator_without_anchors_unless_it_declares_them():
    def by_anchor(rewards, step_rewards, anchor_states=None, **_):
        """Reads anchor states without declaring needs_anchors: the collector gives it None."""
        out = [[np.array([float(len(str(a))) for a in ta]) for ta in ga] for ga in anchor_states]
        return out, out

    report = check_estimator(AdvEstimatorSpec("by_anchor", fn=by_anchor, level="step"))
    assert report.verdicts["valid_output"] == "FAIL" and "TypeError" in str(report)
    assert check_estimator(AdvEstimatorSpec("by_anchor", fn=by_anchor, level="step", needs_anchors=True)).verdicts["valid_output"] == "pass"
    register_rllm_adv_estimator("by_anchor", level="step")(by_anchor)
    try:
        with pytest.raises(TypeError):  # what the collector meets: it gives anchor_states=None
            collect_reward_and_advantage_from_trajectory_groups(agent_groups(), AlgorithmConfig(estimator="by_anchor"))
    finally:
        unregister_rllm_adv_estimator("by_anchor")
