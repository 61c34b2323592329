"""composite: the weighted sum of its terms, each computed here plainly (outcome terms broadcast to steps)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.estimators import calculate_composite_advantages, calculate_step_reinforce_advantages, calculate_turn_grpo_advantages

EPS = 1e-6


def plain_grpo(xs, eps=EPS, norm=True):
    mean, sd = (0.0, 1.0) if len(xs) == 1 else (statistics.fmean(xs), statistics.pstdev(xs))
    return [(x - mean) / (sd + eps) if norm else x - mean for x in xs]


def plain_rloo(xs):
    n = len(xs)
    return list(xs) if n == 1 else [n / (n - 1) * (x - statistics.fmean(xs)) for x in xs]


def plain_step_reinforce(group_rewards, norm=True):
    returns = []
    for r in group_rewards:
        g, out = 0.0, []
        for x in reversed(r):
            g = x + g
            out.append(g)
        returns.append(out[::-1])
    flat = [v for t in returns for v in t]
    if len(flat) == 1:
        return [[0.0]]
    mean, sd = statistics.fmean(flat), statistics.pstdev(flat)
    return [[(v - mean) / (sd + EPS) if norm else v - mean for v in t] for t in returns]


CASE = (
    [[1.0, 0.0, 0.5], [2.0]],
    [[[0.0, 1.0], [0.0], [0.25, 0.25, 0.0]], [[1.0, 1.0]]],
)


@pytest.mark.parametrize("norm", [True, False])
def test_grpo_plus_rloo_with_options_is_the_weighted_sum_broadcast_to_steps(norm):
    outcomes, rewards = CASE
    terms = [["grpo", 0.5], ["rloo", 0.25], ["grpo", 1.0, {"epsilon": 1e-4}], ["step_reinforce", -2.0]]
    got, _ = calculate_composite_advantages(outcomes, rewards, terms=terms, norm_adv_by_std_in_grpo=norm)
    for g, (group_outcomes, group_rewards) in enumerate(zip(outcomes, rewards, strict=True)):
        grpo, rloo, steps = plain_grpo(group_outcomes, norm=norm), plain_rloo(group_outcomes), plain_step_reinforce(group_rewards, norm)
        grpo_4 = plain_grpo(group_outcomes, eps=1e-4, norm=norm)
        for i, traj in enumerate(group_rewards):
            want = [0.5 * grpo[i] + 0.25 * rloo[i] + grpo_4[i] - 2.0 * steps[i][t] for t in range(len(traj))]
            assert got[g][i].tolist() == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_a_term_gets_its_own_options():
    outcomes, rewards = CASE
    got, _ = calculate_composite_advantages(outcomes, rewards, terms=[["step_reinforce", 1.0, {"gamma": 0.5, "method": "mean"}]])
    want, _ = calculate_step_reinforce_advantages(outcomes, rewards, gamma=0.5, method="mean")
    assert [t.tolist() for g in got for t in g] == [t.tolist() for g in want for t in g]


def test_the_collector_and_a_role_of_single_step_trajectories_give_the_outcome_numbers():
    groups = [TrajectoryGroup([Trajectory(steps=[Step()], reward=r) for r in (1.0, 0.0, 0.0)], group_id="t:solver")]
    config = AlgorithmConfig(estimator="composite", estimator_kwargs={"terms": [["grpo", 0.5], ["rloo", 0.5]]})
    collect_reward_and_advantage_from_trajectory_groups(groups, config)
    want = [0.5 * a + 0.5 * b for a, b in zip(plain_grpo([1.0, 0.0, 0.0]), plain_rloo([1.0, 0.0, 0.0]), strict=True)]
    assert [t.steps[0].advantage for t in groups[0].trajectories] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize(
    "terms, message",
    [
        ("gamma", r"estimator 'composite': gamma \(the discount of step returns\) must be a number in \[0, 1\]"),
        (None, r"terms must be a list of \[name, weight\] or \[name, weight, \{options\}\]"),
        ([], r"terms must be a list"),
        ("grpo", r"terms must be a list"),
        ([["grpo"]], r"term 0: must be \[name, weight\] or \[name, weight, \{options\}\], got \['grpo'\]"),
        ([["grpo", 0.5], ["rlo", 0.5]], r"Unknown advantage estimator 'rlo'.*Did you mean 'rloo'\?"),
        ([["grpo", "0.5"]], r"term 0 \('grpo'\): the weight must be a finite number, got str '0.5'"),
        ([["grpo", float("inf")]], r"term 0 \('grpo'\): the weight must be a finite number"),
        (
            [["grpo", 1.0, {"epsilonn": 0.1}]],
            r"term 0 \('grpo'\) options: grpo\(\): unknown option 'epsilonn'; its options: epsilon\. Did you mean 'epsilon'\?",
        ),
        ([["grpo", 1.0, {"norm_adv_by_std_in_grpo": False}]], r"norm_adv_by_std_in_grpo is not an estimator option"),
        ([["grpo", 1.0, [0.1]]], r"term 0 \('grpo'\): options must be a mapping"),
        ([["rloo", 1.0, {"epslion": 1e-4}]], r"term 0 \('rloo'\) options: rloo\(\): unknown option 'epslion'.*Did you mean 'epsilon'\?"),
        ([["grpo", 1.0, {"epsilon": -1.0}]], r"term 0 \('grpo'\) options: grpo\(\): epsilon must be a finite number >= 0"),
        ([["composite", 1.0]], r"term 0: a composite cannot be a term"),
        ([["step_reinforce", 1.0, {"gamma": 2.0}]], r"term 0 \('step_reinforce'\) options: estimator 'step_reinforce': gamma"),
    ],
)
def test_bad_terms_are_refused_when_the_config_is_checked(terms, message):
    groups = [TrajectoryGroup([Trajectory(steps=[Step()], reward=1.0)], group_id="t:solver")]
    options = {} if terms is None else {"terms": [["grpo", 1.0]], "gamma": 1.5} if terms == "gamma" else {"terms": terms}
    with pytest.raises(ValueError, match=message):
        collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="composite", estimator_kwargs=options))


def test_rllm_plugins_check_passes_for_composite_with_its_terms():
    terms = json.dumps({"terms": [["grpo", 0.5], ["turn_grpo", 0.5, {"lam": 0.5}]]})
    done = subprocess.run(
        [sys.executable, "-m", "rllm_plugins", "check", "composite", "--options", terms], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(step-level): OK" in done.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "rllm_plugins", "check", "composite", "--options", "[1]"], capture_output=True, text=True, timeout=120, check=False
    )
    assert bad.returncode == 1 and "--options must be a JSON object" in bad.stderr


def test_an_installed_plugin_is_a_term_like_a_built_in():
    got, _ = calculate_composite_advantages([[0.0, 1.0, 5.0]], [[[0.0], [1.0], [5.0]]], terms=[["median_baseline", 1.0], ["grpo", 0.5]])
    grpo = plain_grpo([0.0, 1.0, 5.0])
    assert [t[0] for t in got[0]] == pytest.approx([-1.0 + 0.5 * grpo[0], 0.0 + 0.5 * grpo[1], 4.0 + 0.5 * grpo[2]], rel=1e-12)


def test_gamma_is_the_discount_of_every_term_that_takes_one_unless_the_term_sets_its_own():
    outcomes, rewards = CASE
    got, _ = calculate_composite_advantages(outcomes, rewards, gamma=0.5, terms=[["step_reinforce", 1.0], ["turn_grpo", 1.0, {"gamma": 1.0}], ["grpo", 1.0]])
    want = [calculate_step_reinforce_advantages(outcomes, rewards, gamma=0.5)[0], calculate_turn_grpo_advantages(outcomes, rewards, gamma=1.0)[0]]
    grpo = [plain_grpo(o) for o in outcomes]
    for g, group in enumerate(got):
        for i, traj in enumerate(group):
            assert traj.tolist() == pytest.approx((want[0][g][i] + want[1][g][i] + grpo[g][i]).tolist(), rel=1e-12)
