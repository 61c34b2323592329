"""step_reinforce's options reproduce every ``reward_normalization`` setting of ROLL's agentic pipeline.

ROLL (alibaba/ROLL, ``roll/pipeline/agentic/utils.py``) computes each step's discounted return, then normalises
the returns of each population (``grouping``: the task group, or the whole ``batch``) with ``method``:
``mean_std`` -> ``(x - mean) / (std + 1e-6)`` with torch's unbiased std, and all zeros when the population has
one member or its std is at most 1e-6; ``mean`` -> ``x - mean``; ``identity`` -> ``x``; ``asym_clip`` ->
``mean_std`` clamped to [-1, 3]. Re-stated here with ``statistics`` and loops.
"""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.estimators import calculate_step_reinforce_advantages


def plain_returns(rewards, gamma):
    out, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def roll_normalise(xs, method):
    if method == "identity":
        return list(xs)
    mean = statistics.fmean(xs)
    if method == "mean":
        return [x - mean for x in xs]
    if len(xs) <= 1 or statistics.stdev(xs) <= 1e-6:
        out = [0.0] * len(xs)
    else:
        sd = statistics.stdev(xs)
        out = [(x - mean) / (sd + 1e-6) for x in xs]
    return [min(max(x, -1.0), 3.0) for x in out] if method == "asym_clip" else out


def roll_step_reinforce(step_rewards, gamma, grouping, method):
    """``step_rewards[g][i][t]`` -> advantages of the same shape, ROLL's way."""
    returns = [[plain_returns(r, gamma) for r in group] for group in step_rewards]
    populations = [[(g, i, t) for i, r in enumerate(group) for t in range(len(r))] for g, group in enumerate(returns)]
    if grouping == "batch":
        populations = [[key for population in populations for key in population]]
    out = {}
    for population in populations:
        for key, value in zip(population, roll_normalise([returns[g][i][t] for g, i, t in population], method), strict=True):
            out[key] = value
    return [[[out[g, i, t] for t in range(len(r))] for i, r in enumerate(group)] for g, group in enumerate(returns)]


ROLL_OPTIONS = {
    "mean_std": {"std_ddof": 1, "min_std": 1e-6},
    "asym_clip": {"method": "asym_clip", "std_ddof": 1, "min_std": 1e-6},
    "mean": {"method": "mean"},
    "identity": {"method": "identity"},
}


def random_case(rng, num_groups=5):
    rewards = []
    for _ in range(num_groups):
        lengths = rng.integers(1, 5, int(rng.integers(1, 5)))
        rewards.append([rng.choice([0.0, 1.0, 3.0, -2.0], int(k)).tolist() for k in lengths])
    rewards.append([[0.5, 0.0], [0.5]])  # returns 0.5, 0, 0.5 with gamma 1 ...
    rewards.append([[2.0]])  # a population of one
    rewards.append([[1.0], [1.0]])  # equal returns: std 0
    return [[float(sum(r)) for r in group] for group in rewards], rewards


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("method", list(ROLL_OPTIONS))
@pytest.mark.parametrize("grouping", ["task_group", "batch"])
def test_every_roll_setting_is_reproduced(seed, method, grouping):
    outcomes, rewards = random_case(np.random.default_rng(seed))
    got, _ = calculate_step_reinforce_advantages(outcomes, rewards, gamma=0.95, grouping=grouping, **ROLL_OPTIONS[method])
    want = roll_step_reinforce(rewards, 0.95, grouping, method)
    for g_got, g_want in zip(got, want, strict=True):
        for t_got, t_want in zip(g_got, g_want, strict=True):
            assert t_got.tolist() == pytest.approx(t_want, rel=1e-9, abs=1e-9)


def test_roll_mean_std_matches_torch_unbiased_std():
    torch = pytest.importorskip("torch")
    x = torch.tensor([1.0, 0.0, 2.5, 2.5], dtype=torch.float64)  # the returns of [1, 0] and [0, 2.5]
    want = ((x - x.mean()) / (x.std() + 1e-6)).tolist()  # torch.std is unbiased by default
    got, _ = calculate_step_reinforce_advantages([[0.0, 0.0]], [[[1.0, 0.0], [0.0, 2.5]]], std_ddof=1, min_std=1e-6)
    assert [v for t in got[0] for v in t.tolist()] == pytest.approx(want, rel=1e-12)


def test_min_std_zeroes_a_population_with_a_tiny_spread_that_plain_mean_std_would_blow_up():
    rewards = [[[1.0], [1.0 + 1e-9]]]
    default, _ = calculate_step_reinforce_advantages([[1.0, 1.0]], rewards)
    roll, _ = calculate_step_reinforce_advantages([[1.0, 1.0]], rewards, min_std=1e-6)
    assert abs(default[0][0][0]) > 1e-4  # (x - mean) / (5e-10 + 1e-6): not 0
    assert [t.tolist() for t in roll[0]] == [[0.0], [0.0]]


def test_defaults_are_unchanged_population_std_per_task_group():
    got, _ = calculate_step_reinforce_advantages([[1.0, 0.0]], [[[0.0, 1.0], [0.0]]])
    xs = [1.0, 1.0, 0.0]
    mean, sd = statistics.fmean(xs), statistics.pstdev(xs)
    assert [v for t in got[0] for v in t.tolist()] == pytest.approx([(x - mean) / (sd + 1e-6) for x in xs], rel=1e-12)


def test_without_std_normalisation_mean_std_is_mean_and_identity_is_unchanged():
    outcomes, rewards = [[1.0, 0.0]], [[[0.0, 1.0], [0.5]]]
    off, _ = calculate_step_reinforce_advantages(outcomes, rewards, norm_adv_by_std_in_grpo=False, std_ddof=1, min_std=1e-6)
    mean, _ = calculate_step_reinforce_advantages(outcomes, rewards, method="mean")
    identity, _ = calculate_step_reinforce_advantages(outcomes, rewards, norm_adv_by_std_in_grpo=False, method="identity")
    assert [t.tolist() for t in off[0]] == [t.tolist() for t in mean[0]]
    assert [t.tolist() for t in identity[0]] == [[1.0, 1.0], [0.5]]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"grouping": "traj_group_id"}, r"grouping must be one of \['task_group', 'batch'\], got 'traj_group_id'"),
        ({"method": "mean_norm"}, r"method must be one of \['mean_std', 'mean', 'identity', 'asym_clip'\], got 'mean_norm'"),
        ({"std_ddof": 2}, r"std_ddof must be 0 \(population std\) or 1 \(unbiased std\), got 2"),
        ({"std_ddof": True}, r"std_ddof"),
        ({"min_std": -1.0}, r"min_std must be None or a finite number >= 0"),
        ({"min_std": "1e-6"}, r"min_std must be None or a finite number >= 0 \(ROLL: 1e-6\), got str '1e-6'"),
        ({"methd": "mean"}, r"unknown option 'methd' for estimator 'step_reinforce'.*Did you mean 'method'\?"),
    ],
)
def test_bad_options_are_refused_at_config_time(options, message):
    groups = [TrajectoryGroup([Trajectory(steps=[Step(reward=1.0)], reward=1.0)], group_id="t:agent")]
    with pytest.raises(ValueError, match=message):
        collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="step_reinforce", estimator_kwargs=options))
