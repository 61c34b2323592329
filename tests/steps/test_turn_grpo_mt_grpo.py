"""turn_grpo's ``std_ddof`` and MT-GRPO (SiliangZeng/Multi-Turn-RL-Agent 7dbdd08, ``mt_grpo_env_trainer.py``) re-stated plainly.

MT-GRPO, two turns per completion (a tool call, then the answer after the tool result): per group of completions, the
outcome reward and the turn reward are each standardised, ``(r - mean) / (unbiased std + 1e-4)``; a completion gets
``A_outcome + coef * A_turn`` on its first turn's tokens and ``A_outcome`` on the rest. A completion without a tool
result (one turn) gets the standardised combined reward ``R_outcome + R_turn`` on every token (``single_turn="combined"``).
"""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.estimators import calculate_turn_grpo_advantages
from rllm_plugins.options import check_estimator_kwargs
from rllm_plugins.registry import get_estimator


def standardise(xs):
    mean, sd = statistics.fmean(xs), statistics.stdev(xs)
    return [(x - mean) / (sd + 1e-4) for x in xs]


def mt_grpo(outcome_rewards, turn_rewards, coef):
    """Per completion: ``[first turn's advantage, second turn's advantage]``."""
    outcome, turn = standardise(outcome_rewards), standardise(turn_rewards)
    return [[o + coef * t, o] for o, t in zip(outcome, turn, strict=True)]


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("coef", [1.0, 0.5])
def test_mt_grpo_is_turn_grpo_with_reward_present_lam_ddof_1_and_epsilon_1e_4(seed, coef):
    rng = np.random.default_rng(seed)
    outcomes, step_rewards, want = [], [], []
    for _ in range(3):
        n = int(rng.integers(2, 6))
        outcome_rewards = rng.choice([0.0, 1.0, 0.5], size=n).tolist()
        turn_rewards = rng.choice([0.0, 0.2, 1.0], size=n).tolist()
        if len(set(outcome_rewards)) == 1:
            outcome_rewards[0] += 1.0
        if len(set(turn_rewards)) == 1:
            turn_rewards[0] += 1.0
        outcomes.append(np.array(outcome_rewards))
        step_rewards.append([np.array([rt, 0.0]) for rt in turn_rewards])
        want += mt_grpo(outcome_rewards, turn_rewards, coef)
    got, _ = calculate_turn_grpo_advantages(outcomes, step_rewards, value="reward", ended="present", lam=coef, std_ddof=1, epsilon=1e-4)
    np.testing.assert_allclose([a for group in got for a in group], want, rtol=1e-9, atol=1e-12)


def test_through_the_collector_a_turn_reward_of_0_puts_the_outcome_on_the_answer_turn():
    """The collector's outcome-only rule: a trajectory whose step rewards are all 0 gets its outcome on its last step, so
    there MT-GRPO's ``[R_turn, 0]`` with ``R_turn = 0`` is not MT-GRPO (the list form, verl and TRL take the rewards as given)."""
    outcome_rewards, turn_rewards = [1.0, 0.0, 1.0], [0.0, 1.0, 1.0]
    trajectories = [Trajectory(steps=[Step(reward=rt), Step(reward=0.0)], reward=ro) for ro, rt in zip(outcome_rewards, turn_rewards, strict=True)]
    options = {"value": "reward", "ended": "present", "lam": 1.0, "std_ddof": 1, "epsilon": 1e-4}
    config = AlgorithmConfig(estimator="turn_grpo", estimator_kwargs=options)
    collect_reward_and_advantage_from_trajectory_groups([TrajectoryGroup(trajectories, "t:a")], config)
    got = [[step.advantage for step in traj.steps] for traj in trajectories]
    listed, _ = calculate_turn_grpo_advantages([np.array(outcome_rewards)], [[np.array([rt, 0.0]) for rt in turn_rewards]], **options)
    np.testing.assert_allclose(listed[0], mt_grpo(outcome_rewards, turn_rewards, 1.0), rtol=1e-9)
    assert got[0][1] != pytest.approx(listed[0][0][1])  # trajectory 0 (R_turn 0): its outcome moved onto its answer turn


def test_std_ddof_1_divides_by_the_unbiased_std_in_both_levels_absorbing_included():
    outcomes = [np.array([1.0, 0.0, 1.0])]
    step_rewards = [[np.array([0.0, 1.0]), np.array([0.0]), np.array([0.0, 0.0, 1.0])]]
    got, _ = calculate_turn_grpo_advantages(outcomes, step_rewards, std_ddof=1)
    episode = [(r - 2 / 3) / (statistics.stdev([1.0, 0.0, 1.0]) + 1e-6) for r in (1.0, 0.0, 1.0)]
    returns = [[1.0, 1.0], [0.0], [1.0, 1.0, 1.0]]  # gamma 1; absorbing: an ended trajectory counts 0 at later turns
    per_turn = {t: [r[t] if t < len(r) else 0.0 for r in returns] for t in range(3)}

    def turn_part(x, t):
        xs = per_turn[t]
        return (x - statistics.fmean(xs)) / (statistics.stdev(xs) + 1e-6)

    want = [[episode[i] + turn_part(x, t) for t, x in enumerate(r)] for i, r in enumerate(returns)]
    for a, b in zip(got[0], want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9)


def test_std_ddof_other_than_0_or_1_is_refused():
    with pytest.raises(ValueError, match=r"turn_grpo': std_ddof must be 0 \(population std\) or 1 \(unbiased std\), got 2"):
        check_estimator_kwargs(
            {"turn_grpo": get_estimator("turn_grpo")}, {"std_ddof": 2}, where="algorithm.rllm_estimator_kwargs", norm_field="norm_adv_by_std_in_grpo"
        )


def mt_grpo_with_untooled(outcome_rewards, turn_rewards, tooled, coef):
    """MT-GRPO's ``_assign_advantages``, both branches: per completion, its turns' advantages (two with a tool result, else one)."""
    outcome, turn = standardise(outcome_rewards), standardise(turn_rewards)
    combined = standardise([o + t for o, t in zip(outcome_rewards, turn_rewards, strict=True)])
    return [[o + coef * t, o] if has else [c] for o, t, c, has in zip(outcome, turn, combined, tooled, strict=True)]


@pytest.mark.parametrize("seed", range(12))
def test_mt_grpo_with_completions_without_a_tool_result_is_single_turn_combined(seed):
    rng = np.random.default_rng(100 + seed)
    coef = float(rng.choice([1.0, 0.5]))
    outcomes, step_rewards, want = [], [], []
    for _ in range(3):
        n = int(rng.integers(2, 7))
        outcome_rewards = rng.choice([0.0, 1.0, 0.5], size=n).tolist()
        turn_rewards = rng.choice([0.0, 0.2, 1.0], size=n).tolist()
        tooled = (rng.random(n) < 0.6).tolist()
        outcome_rewards[0] += 1.0  # spread in every standardised population
        turn_rewards[1] += 0.3
        outcomes.append(np.array(outcome_rewards))
        step_rewards.append([np.array([rt, 0.0] if has else [rt]) for rt, has in zip(turn_rewards, tooled, strict=True)])
        want += mt_grpo_with_untooled(outcome_rewards, turn_rewards, tooled, coef)
    options = {"value": "reward", "ended": "present", "lam": coef, "std_ddof": 1, "epsilon": 1e-4}
    got, _ = calculate_turn_grpo_advantages(outcomes, step_rewards, **options, single_turn="combined")
    flat = [a for group in got for a in group]
    for a, b in zip(flat, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    plain, _ = calculate_turn_grpo_advantages(outcomes, step_rewards, **options)
    for a, b, steps in zip(flat, [a for group in plain for a in group], [r for group in step_rewards for r in group], strict=True):
        if steps.size > 1:
            np.testing.assert_array_equal(a, b)  # two turns: the option changes nothing


def test_single_turn_combined_permutes_with_the_trajectories_and_refuses_an_overflowing_sum():
    outcomes = [np.array([1.0, 0.0, 0.5, 0.25])]
    step_rewards = [[np.array([0.2, 0.0]), np.array([1.0]), np.array([0.0]), np.array([0.5, 0.5])]]
    got, _ = calculate_turn_grpo_advantages(outcomes, step_rewards, single_turn="combined")
    order = [2, 0, 3, 1]
    moved, _ = calculate_turn_grpo_advantages([outcomes[0][order]], [[step_rewards[0][i] for i in order]], single_turn="combined")
    for k, i in enumerate(order):
        np.testing.assert_allclose(moved[0][k], got[0][i], rtol=1e-12)
    with pytest.raises(ValueError, match=r"single_turn='combined'\): task group 0, trajectory 1: its reward plus its step rewards overflows float64"):
        calculate_turn_grpo_advantages([np.array([1.0, 1.5e308])], [[np.array([0.0, 0.0]), np.array([1.5e308])]], single_turn="combined")


@pytest.mark.parametrize("value, message", [("combine", r"single_turn must be one of \['turns', 'combined'\], got 'combine'"), (1, "must be a str")])
def test_a_wrong_single_turn_is_refused_at_config_time(value, message):
    with pytest.raises(ValueError, match=message):
        check_estimator_kwargs(
            {"turn_grpo": get_estimator("turn_grpo")}, {"single_turn": value}, where="algorithm.rllm_estimator_kwargs", norm_field="norm_adv_by_std_in_grpo"
        )


def test_single_turn_combined_reads_only_the_task_groups_with_a_one_step_trajectory():
    """A huge sum in a task group without one-step trajectories is never read: the batch is not refused for it."""
    outcomes = [np.array([1e308, 1.0]), np.array([1.0, 0.0])]
    step_rewards = [[np.array([1e308, 0.0]), np.array([0.0, 0.0])], [np.array([0.5]), np.array([0.0])]]
    got, _ = calculate_turn_grpo_advantages(outcomes, step_rewards, single_turn="combined")
    plain, _ = calculate_turn_grpo_advantages(outcomes, step_rewards)
    for a, b in zip(got[0], plain[0], strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose([got[1][0][0], got[1][1][0]], [(1.5 - 0.75) / (0.75 + 1e-6), (0.0 - 0.75) / (0.75 + 1e-6)], rtol=1e-12)


def test_single_turn_combined_in_a_task_group_of_one_takes_grpos_convention():
    got, _ = calculate_turn_grpo_advantages([np.array([1.0])], [[np.array([0.5])]], single_turn="combined", std_ddof=1)
    np.testing.assert_allclose(got[0][0], [1.5 / (1 + 1e-6)], rtol=1e-12)  # mean 0, std 1, as grpo
