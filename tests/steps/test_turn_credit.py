"""``turn_credit`` against a plain re-statement of prime-rl PR #3282's formulas (``turn_credit.py`` at 510fde36), on random traces.

The re-statement below is written from the PR's description and code read as facts: per rollout, scores ->
deltas (the first scored turn and unscored turns get 0; a scored turn gets its score minus the last scored one)
-> each turn's delta divided by ``Z_t = sum_{k<t} gamma^k`` (t 1-based) and summed backwards with ``gamma`` ->
level ``(R + sum of deltas) - group mean`` -> ``level + beta * (c_t - cbar)``, ``cbar`` the token-weighted mean
over turns with tokens. Our ``center="tokens"`` is that; ``center="turns"`` weighs every turn 1.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.estimators.turn_credit import calculate_turn_credit_advantages


def peer_deltas(scores):
    out, last = [0.0] * len(scores), None
    for i, score in enumerate(scores):
        if score is None:
            continue
        if last is not None:
            out[i] = score - last
        last = score
    return out


def peer_smear(progress, gamma):
    values = [r / (t if gamma == 1.0 else (1.0 - gamma**t) / (1.0 - gamma)) for t, r in enumerate(progress, start=1)]
    credits, acc = [0.0] * len(progress), 0.0
    for t in range(len(progress) - 1, -1, -1):
        acc = values[t] + gamma * acc
        credits[t] = acc
    return credits


def peer_group(rewards, scores, tokens, gamma, beta):
    """Per rollout, per turn: prime-rl's advantage of a turn (every token of a turn carries it)."""
    returns = [r + (sum(peer_deltas(s)) if s is not None else 0.0) for r, s in zip(rewards, scores, strict=True)]
    baseline = sum(returns) / len(returns)
    out = []
    for s, ret, tok in zip(scores, returns, tokens, strict=True):
        level = ret - baseline
        if s is None or beta == 0.0:
            out.append([level] * len(tok))
            continue
        credits = peer_smear(peer_deltas(s), gamma)
        weight = sum(tok)
        center = sum(c * w for c, w in zip(credits, tok, strict=True)) / weight
        out.append([level + beta * (c - center) for c in credits])
    return out


def random_group(rng: random.Random):
    n = rng.randint(1, 5)
    rewards, scores, tokens = [], [], []
    for _ in range(n):
        turns = rng.randint(1, 7)
        rewards.append(rng.choice([0.0, 1.0, rng.uniform(-2, 2)]))
        if rng.random() < 0.15:
            scores.append(None)  # no scores at all: plain level
        else:
            scores.append([None if rng.random() < 0.3 else rng.choice([0.0, 0.5, 1.0, rng.uniform(-1, 1)]) for _ in range(turns)])
        tokens.append([rng.randint(1, 9) for _ in range(turns)])
    return rewards, scores, tokens


def as_group(rewards, scores, tokens, gid):
    trajectories = []
    for r, s, tok in zip(rewards, scores, tokens, strict=True):
        per_turn = s if s is not None else [None] * len(tok)
        steps = [Step(response_ids=[7] * k, metadata={} if v is None else {"turn_score": v}) for v, k in zip(per_turn, tok, strict=True)]
        trajectories.append(Trajectory(steps=steps, reward=r))
    return TrajectoryGroup(trajectories, group_id=f"{gid}:agent")


def test_equals_prime_rl_on_random_traces():
    rng = random.Random(3282)
    cases, worst, trajectories, turns = 0, 0.0, 0, 0
    for case in range(400):
        gamma = rng.choice([1.0, 0.0, 0.5, 0.9, rng.uniform(0, 1)])
        beta = rng.choice([0.0, 1.0, rng.uniform(0, 3)])
        groups = [random_group(rng) for _ in range(rng.randint(1, 4))]
        if all(s is None or all(v is None for v in s) for _, scores, _ in groups for s in scores):  # a batch without any score reads
            groups[0][1][0] = [0.0] + [None] * (len(groups[0][2][0]) - 1)  # the step rewards instead (tested below): give one score
        config = AlgorithmConfig(estimator="turn_credit", estimator_kwargs={"gamma": gamma, "beta": beta, "center": "tokens"})
        built = [as_group(*g, f"t{case}_{k}") for k, g in enumerate(groups)]
        collect_reward_and_advantage_from_trajectory_groups(built, config)
        for group, (rewards, scores, tokens) in zip(built, groups, strict=True):
            expected = peer_group(rewards, scores, tokens, gamma, beta)
            got = [[step.advantage for step in traj.steps] for traj in group.trajectories]
            for e, g in zip(expected, got, strict=True):
                np.testing.assert_allclose(g, e, rtol=0, atol=1e-12)
                worst = max(worst, float(np.max(np.abs(np.subtract(g, e)))))
                trajectories, turns = trajectories + 1, turns + len(e)
            cases += 1
    # the numbers docs/turn_level.md quotes
    doc = (Path(__file__).resolve().parents[2] / "docs" / "turn_level.md").read_text()
    quoted = re.search(r"equals it on ([\d,]+) random task\s+groups \(([\d,]+) trajectories, ([\d,]+) turns;.*?to within ([\d.e-]+) ", doc, re.S)
    assert quoted is not None
    assert [int(x.replace(",", "")) for x in quoted.groups()[:3]] == [cases, trajectories, turns]
    assert worst <= float(quoted.group(4)) <= 1e-14


def test_center_turns_is_the_unweighted_mean_and_zero_sum_per_trajectory():
    group = as_group([1.0, 0.0], [[0.0, None, 1.0], [0.2, 0.1]], [[1, 5, 2], [3, 3]], "q")
    config = AlgorithmConfig(estimator="turn_credit", estimator_kwargs={"gamma": 0.5, "beta": 2.0})
    collect_reward_and_advantage_from_trajectory_groups([group], config)
    # trajectory 0: deltas [0, 0, 1]; Z = [1, 1.5, 1.75]; c_3 = 1/1.75, c_2 = 0.5 c_3, c_1 = 0.25 c_3; net 1
    c3 = 1 / 1.75
    credits0 = [0.25 * c3, 0.5 * c3, c3]
    # trajectory 1: deltas [0, -0.1]; Z = [1, 1.5]; c_2 = -0.1/1.5, c_1 = 0.5 c_2; net -0.1
    credits1 = [0.5 * -0.1 / 1.5, -0.1 / 1.5]
    returns = [1.0 + 1.0, 0.0 - 0.1]
    mean = sum(returns) / 2
    for traj, credits, ret in zip(group.trajectories, [credits0, credits1], returns, strict=True):
        cbar = sum(credits) / len(credits)
        expected = [ret - mean + 2.0 * (c - cbar) for c in credits]
        assert [s.advantage for s in traj.steps] == pytest.approx(expected, abs=1e-12)
        assert sum(s.advantage for s in traj.steps) / len(traj.steps) == pytest.approx(ret - mean, abs=1e-12)


def test_without_any_turn_score_in_the_batch_the_step_rewards_are_the_scores():
    group = TrajectoryGroup(
        [
            Trajectory(steps=[Step(reward=0.2), Step(reward=0.2), Step(reward=0.7)], reward=1.0),
            Trajectory(steps=[Step(reward=0.1), Step(reward=0.0)], reward=0.0),
        ],
        group_id="q:agent",
    )
    collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(estimator="turn_credit", estimator_kwargs={"gamma": 1.0}))
    expected = peer_group([1.0, 0.0], [[0.2, 0.2, 0.7], [0.1, 0.0]], [[1, 1, 1], [1, 1]], 1.0, 1.0)
    for traj, want in zip(group.trajectories, expected, strict=True):
        assert [s.advantage for s in traj.steps] == pytest.approx(want, abs=1e-12)


def test_list_form_reads_the_scores_from_traj_groups():
    group = as_group([1.0, 0.0], [[0.0, 1.0], None], [[1, 1], [1, 1, 1]], "q")
    advantages, _ = calculate_turn_credit_advantages(
        rewards=[np.array([1.0, 0.0])], step_rewards=[[[0.0, 0.0], [0.0, 0.0, 0.0]]], traj_groups=[group], gamma=1.0, beta=1.0
    )
    expected = peer_group([1.0, 0.0], [[0.0, 1.0], None], [[1, 1], [1, 1, 1]], 1.0, 1.0)
    for got, want in zip(advantages[0], expected, strict=True):
        assert list(got) == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"gamma": 1.5}, "gamma (the discount of step returns) must be a number in [0, 1], got float 1.5"),
        ({"beta": float("nan")}, "option 'beta' of estimator 'turn_credit' must be finite, got nan"),
        ({"center": "token"}, "center must be one of ['turns', 'tokens'], got 'token'"),
    ],
)
def test_bad_options_are_refused_at_config_time(options, message):
    group = as_group([1.0], [[0.0]], [[1]], "q")
    with pytest.raises(ValueError, match=re.escape(message)):
        collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(estimator="turn_credit", estimator_kwargs=options))


def test_a_score_that_is_no_number_names_the_step():
    group = as_group([1.0], [[0.0, 1.0]], [[1, 1]], "q")
    group.trajectories[0].steps[1].metadata["turn_score"] = "high"
    with pytest.raises(ValueError, match=r"group 0 \(group_id 'q:agent'\), trajectory 0, step 1: metadata\['turn_score'\] must be a finite number or None"):
        collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(estimator="turn_credit"))
