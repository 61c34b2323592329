"""The step-level contract checker: options exercised, trajectory and group permutations, anchor ids as the
collector gives them, and shrunk counterexamples printed once."""

from __future__ import annotations

import numpy as np
import pytest

from rllm_plugins import AdvEstimatorSpec, AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.registry import register_rllm_adv_estimator, unregister_rllm_adv_estimator
from rllm_plugins.steps import StepBatch
from rllm_plugins.testing import check_estimator


def returns_minus_group_mean(batch: StepBatch) -> np.ndarray:
    """Undiscounted step returns minus their task group's mean over steps, written as plain loops."""
    out = np.zeros(batch.num_steps)
    for g in range(batch.num_groups):
        first, last = batch.group_step_offsets[g], batch.group_step_offsets[g + 1]
        returns = []
        for i in range(batch.traj_offsets[g], batch.traj_offsets[g + 1]):
            rewards = batch.step_rewards[batch.step_offsets[i] : batch.step_offsets[i + 1]]
            returns += [float(sum(rewards[t:])) for t in range(len(rewards))]
        mean = sum(returns) / len(returns)
        out[first:last] = [r - mean for r in returns]
    return out


def test_an_option_the_estimator_ignores_fails_options_matter_naming_it():
    def ignores_gamma(batch: StepBatch, /, *, gamma: float = 1.0, **_):
        return returns_minus_group_mean(batch)  # gamma accepted, never read

    report = check_estimator(AdvEstimatorSpec("ignores_gamma", batched=ignores_gamma, level="step", options=()))
    assert report.verdicts["options_matter"] == "FAIL"
    assert "option 'gamma' never changed the output (tried [0.5, 0.0, 2.0, 0.9] against the default 1.0" in str(report)
    assert report.verdicts["valid_output"] == "pass"


@pytest.mark.parametrize("name", ["gigpo", "step_reinforce"])
def test_the_built_ins_options_all_matter(name):
    assert check_estimator(name).verdicts["options_matter"] == "pass"


def test_an_estimator_without_options_to_try_skips_options_matter():
    def plain(batch: StepBatch, /, **_):
        return returns_minus_group_mean(batch)

    report = check_estimator(AdvEstimatorSpec("plain", batched=plain, level="step", options=()))
    assert report.ok and report.verdicts["options_matter"].startswith("skipped")


def test_a_position_dependence_that_reversal_keeps_is_caught_by_a_permutation():
    def favours_the_middle(batch: StepBatch, /, **_):
        """Wrong: trajectories away from both ends of their group get twice the advantage (reversing a group keeps that)."""
        out = returns_minus_group_mean(batch)
        for g in range(batch.num_groups):
            first, last = int(batch.traj_offsets[g]), int(batch.traj_offsets[g + 1])
            for i in range(first + 1, last - 1):
                out[batch.step_offsets[i] : batch.step_offsets[i + 1]] *= 2
        return out

    report = check_estimator(AdvEstimatorSpec("favours_the_middle", batched=favours_the_middle, level="step", options=()))
    assert report.verdicts["trajectory_order"] == "FAIL"
    assert "changed their advantages, not only their order" in str(report)


def test_a_dependence_on_group_order_fails_group_order_unless_declared():
    def later_groups_more(batch: StepBatch, /, **_):
        return returns_minus_group_mean(batch) + batch.step_group

    spec = AdvEstimatorSpec("later_groups_more", batched=later_groups_more, level="step", options=())
    assert check_estimator(spec).verdicts["group_order"] == "FAIL"
    declared = AdvEstimatorSpec("later_groups_more", batched=later_groups_more, level="step", options=(), group_order_invariant=False)
    assert check_estimator(declared).verdicts["group_order"].startswith("skipped: declared group_order_invariant=False")


def test_a_list_form_plugin_gets_the_same_anchor_ids_from_the_collector_and_the_checker():
    received: list[object] = []

    def recording(rewards, step_rewards, anchor_states=None, **_):
        received.append(anchor_states)
        out = [[np.zeros(len(t)) for t in g] for g in step_rewards]
        return out, out

    register_rllm_adv_estimator("recording", level="step", needs_anchors=True)(recording)
    try:
        group = TrajectoryGroup(
            [
                Trajectory(steps=[Step(observation="start"), Step(observation="door")], reward=1.0),
                Trajectory(steps=[Step(observation="start"), Step(observation="start")], reward=0.0),
            ],
            group_id="task0:agent",
        )
        collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(estimator="recording"))
        assert received == [[[[0, 1], [0, 0]]]]  # the anchor-group ids of start, door, start, start
        received.clear()
        assert check_estimator("recording").ok
        states = [s for call in received if call for g in call for t in g for s in t]
        assert states and all(type(s) is int for s in states)  # before: the checker passed the states ("s0", "task1", ...)
    finally:
        unregister_rllm_adv_estimator("recording")


def test_a_failing_step_case_is_shrunk_and_printed_once():
    def nan_everywhere(batch: StepBatch, /, **_):
        return np.full(batch.num_steps, np.nan)

    report = check_estimator(AdvEstimatorSpec("nan_everywhere", batched=nan_everywhere, level="step", options=()))
    failed = [v.rule for v in report.violations]
    assert {"valid_output", "forms_agree", "deterministic"} <= set(failed)
    simplest = "outcomes=[[0.0]], step_rewards=[[[0.0]]], anchors=[[['s0']]]"
    assert str(report.violations[0].example) == simplest
    assert str(report).count("outcomes=") == 1
    assert f"minimal failing example: as for {failed[0]}" in str(report)


def test_check_hints_at_level_step_for_a_step_style_function_registered_without_it():
    def step_fn(batch: StepBatch, /, **_):
        return np.zeros(batch.num_steps)

    def list_fn(rewards, step_rewards, anchor_states=None, **_):
        return step_rewards, step_rewards

    hint = "a step-level estimator's: declare level='step' (AdvEstimatorSpec or @register_rllm_adv_estimator)"
    batched = check_estimator(AdvEstimatorSpec("forgot", batched=step_fn))
    assert "TypeError" in str(batched) and f"its signature takes one batch (a StepBatch), {hint}" in str(batched)
    listed = check_estimator(AdvEstimatorSpec("forgot", fn=list_fn))
    assert f"its signature takes step_rewards, anchor_states, {hint}" in str(listed)
    assert "declare level" not in str(check_estimator(AdvEstimatorSpec("fine", fn=lambda rewards, **_: (rewards, rewards))))
