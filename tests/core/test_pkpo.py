"""``pkpo`` (rLLM PR #743) against a plain computation of the PR's formula over every k-subset, in exact fractions.

The PR: ``s_i = (1/C(n,k)) * sum over k-subsets S containing i of max_{j in S} r_j``, then ``A_i = s_i - mean(s)``;
``k`` clamped to ``[1, n]``; a group of one gets 0.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from fractions import Fraction

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups, get_rllm_adv_estimator
from rllm_plugins.estimators import calculate_pkpo_advantages, check_group_size, pkpo
from rllm_plugins.registry import get_estimator
from rllm_plugins.segments import offsets_from_sizes


def by_subsets(rewards: list[Fraction], k: int) -> list[Fraction]:
    """PR #743's formula, literally: every k-subset, its max credited to each member."""
    n = len(rewards)
    if n <= 1:
        return [Fraction(0)] * n
    k = max(1, min(k, n))
    credit = [Fraction(0)] * n
    for subset in itertools.combinations(range(n), k):
        best = max(rewards[j] for j in subset)
        for i in subset:
            credit[i] += best
    credit = [c / math.comb(n, k) for c in credit]
    mean = sum(credit) / n
    return [c - mean for c in credit]


def test_the_prs_example_gives_plus_minus_one_twelfth():
    advantages, returns = calculate_pkpo_advantages([np.array([1.0, 0.0, 1.0, 0.0])], k=2)
    assert advantages[0].tolist() == pytest.approx([1 / 12, -1 / 12, 1 / 12, -1 / 12], abs=1e-15)
    assert by_subsets([Fraction(1), Fraction(0), Fraction(1), Fraction(0)], 2) == [Fraction(1, 12), Fraction(-1, 12)] * 2
    assert returns[0].tolist() == advantages[0].tolist()


def test_k_one_is_the_mean_centred_reward_over_n():
    rewards = [1.0, 2.0, 3.0, 4.0]
    (advantages,), _ = calculate_pkpo_advantages([np.array(rewards)], k=1)
    assert advantages.tolist() == pytest.approx([(r - 2.5) / 4 for r in rewards], abs=1e-15)


def test_binary_rewards_give_a_success_k_over_n_before_centring():
    # n = 6, 2 successes, k = 3: a success is in C(5, 2) = 10 subsets, all with max 1: 10 / C(6, 3) = 1/2 = k/n
    rewards = [Fraction(1), Fraction(1), Fraction(0), Fraction(0), Fraction(0), Fraction(0)]
    failure_credit = Fraction(math.comb(5, 2) - math.comb(3, 2), math.comb(6, 3))  # subsets with at least one success
    mean = (2 * Fraction(1, 2) + 4 * failure_credit) / 6
    assert by_subsets(rewards, 3) == [Fraction(1, 2) - mean] * 2 + [failure_credit - mean] * 4
    (advantages,), _ = calculate_pkpo_advantages([np.array([1.0, 1.0, 0.0, 0.0, 0.0, 0.0])], k=3)
    assert advantages.tolist() == pytest.approx([float(a) for a in by_subsets(rewards, 3)], abs=1e-15)


@pytest.mark.parametrize("seed", range(6))
def test_random_groups_match_the_formula_over_every_subset(seed):
    rng = random.Random(seed)
    sizes = [rng.randint(1, 7) for _ in range(5)]
    groups = [[Fraction(rng.choice([0, 1, 2, 5]), rng.choice([1, 2, 4])) for _ in range(n)] for n in sizes]  # ties on purpose
    k = rng.randint(1, 8)
    advantages, _ = calculate_pkpo_advantages([np.array([float(r) for r in g]) for g in groups], k=k)
    for got, group in zip(advantages, groups, strict=True):
        assert got.tolist() == pytest.approx([float(a) for a in by_subsets(group, k)], abs=1e-12)
    values = np.array([float(r) for g in groups for r in g])
    batched = pkpo(values, offsets_from_sizes(sizes), k=k)
    assert batched.tolist() == pytest.approx([float(a) for g in groups for a in by_subsets(g, k)], abs=1e-12)


@pytest.mark.parametrize("scale", [1.0, 3.0, 1e-300, 1e300])
def test_k_one_is_each_reward_over_n_centred_bit_for_bit_with_ties_equal(scale):
    """k = 1 (the default): credit r / n on each row divided by a power of two near its largest magnitude, mean-centred
    with one correction pass, written plainly; tied rewards (0/1 rewards, signed zeros) get identical advantages."""
    rng = np.random.default_rng(0)
    signed_zeros = [rng.choice([-0.0, 0.0, 1.0], size=(64, 16)), np.full((2, 16), -0.0), rng.choice([-5e-324, -0.0, -1.0], size=(8, 16))]
    rows = np.concatenate([rng.integers(0, 2, size=(64, 16)), rng.normal(size=(64, 16)), *signed_zeros]) * scale
    _, exponent = np.frexp(np.abs(rows).max(axis=1, keepdims=True))
    power = np.where(np.abs(rows).max(axis=1, keepdims=True) > 0, np.ldexp(1.0, exponent - 1), 1.0)
    credit = rows / power * (1 / 16) + 0.0
    centre = credit.mean(axis=1, keepdims=True)
    centre += (credit - centre).mean(axis=1, keepdims=True)
    want = (credit - centre) * power
    got = pkpo(rows.reshape(-1), np.arange(0, rows.size + 1, 16), k=1).reshape(rows.shape)
    assert got.view(np.int64).tolist() == want.view(np.int64).tolist()
    for r, a in zip(rows.tolist(), got.tolist(), strict=True):
        by_reward: dict[float, set[float]] = {}
        for reward, advantage in zip(r, a, strict=True):
            by_reward.setdefault(reward, set()).add(advantage)
        assert all(len(advantages) == 1 for advantages in by_reward.values())


@pytest.mark.parametrize("n", [2, 3, 6, 9])
def test_many_groups_in_one_call_match_the_formula_and_each_group_alone_bit_for_bit(n):
    """Enough groups that the credit is scanned column by column: the same numbers as each group alone (a row scan)."""
    rng = random.Random(n)
    groups = [[Fraction(rng.choice([0, 1, 2, 5]), rng.choice([1, 2, 4])) for _ in range(n)] for _ in range(8 * n)]  # ties on purpose
    values = np.array([float(r) for g in groups for r in g])
    for k in sorted({1, 2, max(1, n // 2), n}):
        together = pkpo(values, np.arange(0, values.size + 1, n), k=k)
        alone = np.concatenate([pkpo(values[i : i + n], np.array([0, n]), k=k) for i in range(0, values.size, n)])
        assert together.view(np.int64).tolist() == alone.view(np.int64).tolist()
        assert together.tolist() == pytest.approx([float(a) for g in groups for a in by_subsets(g, k)], abs=1e-12)
        for g, a in zip(groups, together.reshape(-1, n).tolist(), strict=True):
            assert len({(r, x) for r, x in zip(g, a, strict=True)}) == len(set(g))  # tied rewards: one advantage


def test_a_group_of_one_and_k_at_or_above_the_group_size_give_zero():
    advantages, _ = calculate_pkpo_advantages([np.array([2.5]), np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0])], k=3)
    assert [a.tolist() for a in advantages] == [[0.0], [0.0, 0.0, 0.0], [0.0, 0.0]]


@pytest.mark.parametrize("rewards", [np.array([1, 0, 1, 0]), np.array([1, 0, 1, 0], dtype=np.float32), np.array([True, False, True, False])])
def test_int_float32_and_bool_rewards_give_the_same_advantages(rewards):
    (advantages,), _ = calculate_pkpo_advantages([rewards], k=2)
    assert advantages.dtype == np.float64 and advantages.tolist() == pytest.approx([1 / 12, -1 / 12] * 2, abs=1e-15)


def test_k_comes_from_rllms_pass_at_k_field_through_both_signatures_and_the_collector():
    config = AlgorithmConfig(estimator="pkpo", pass_at_k=2)
    (positional,), _ = calculate_pkpo_advantages([np.array([1.0, 0.0, 1.0, 0.0])], config)
    assert positional.tolist() == pytest.approx([1 / 12, -1 / 12] * 2, abs=1e-15)
    assert get_rllm_adv_estimator("pkpo") is not None
    group = TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1]), Step(response_ids=[2])], reward=r) for r in (1.0, 0.0, 1.0, 0.0)], group_id="q:solver")
    collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig.from_config({"adv_estimator": "pkpo", "pass_at_k": 2}))
    assert [t.steps[1].advantage for t in group.trajectories] == pytest.approx([1 / 12, -1 / 12] * 2, abs=1e-15)


def test_option_k_works_without_pass_at_k_and_defaults_to_one():
    group = TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1])], reward=r) for r in (1.0, 2.0, 3.0, 4.0)], group_id="q")
    collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(estimator="pkpo"))
    assert [t.steps[0].advantage for t in group.trajectories] == pytest.approx([-0.375, -0.125, 0.125, 0.375], abs=1e-15)
    collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(estimator="pkpo", estimator_kwargs={"k": 4}))
    assert [t.steps[0].advantage for t in group.trajectories] == [0.0] * 4


@pytest.mark.parametrize("k, problem", [(0, "k must be at least 1, got 0"), ("2", "k must be an int"), (2.0, "k must be an int"), (True, "k must be an int")])
def test_a_bad_k_is_refused_before_any_estimator_runs(k, problem):
    group = TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1])], reward=r) for r in (1.0, 0.0)], group_id="q")
    with pytest.raises(ValueError, match=problem):
        collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(estimator="pkpo", estimator_kwargs={"k": k}))
    assert group.trajectories[0].steps[0].advantage is None


def test_k_not_below_the_configured_group_size_is_refused_at_config_time():
    spec = get_estimator("pkpo").spec
    check_group_size(spec, {"k": 3}, 4)
    with pytest.raises(ValueError, match=r"estimator 'pkpo': k=4 is not below the group size 4 .* advantage 0; choose k < 4"):
        check_group_size(spec, {"k": 4}, 4)
    with pytest.raises(ValueError, match="k=9 is not below the group size 8"):
        check_group_size(spec, {"k": 9}, 8)


# the worked example of docs/semantics.md: g0 = [1, 0, 0.5, 0], g1 = [1, 0], g2 = [1], response lengths 4, 2, 3, 1, 1, 3, 2
WORKED = [np.array([1.0, 0.0, 0.5, 0.0]), np.array([1.0, 0.0]), np.array([1.0])]
WORKED_LENGTHS = np.array([4.0, 2.0, 3.0, 1.0, 1.0, 3.0, 2.0])


def semantics_row(label: str) -> list[float]:
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "semantics.md").read_text()
    section = page.split("## The worked example", 1)[1].split("\n## ", 1)[0]
    (line,) = [line for line in section.splitlines() if line.startswith(f"| {label} |")]
    return [float(cell) for cell in line.strip("|").split("|")[1:]]


@pytest.mark.parametrize("k", [1, 2])
def test_the_worked_example_rows_of_the_semantics_page(k):
    advantages, _ = calculate_pkpo_advantages(WORKED, k=k)
    assert semantics_row(f"`pkpo` (`k = {k}`)") == [round(float(a), 4) for a in np.concatenate(advantages)]
    exact = [a for g in WORKED for a in by_subsets([Fraction(float(r)) for r in g], k)]
    assert semantics_row(f"`pkpo` (`k = {k}`)") == pytest.approx([float(a) for a in exact], abs=5.1e-5)


def test_the_worked_example_row_of_minus_length_weighted_mean():
    from rllm_plugins.estimators import calculate_minus_length_weighted_mean_advantages

    rewards = [float(r) for g in WORKED for r in g]
    baseline = sum(r * n for r, n in zip(rewards, WORKED_LENGTHS.tolist(), strict=True)) / float(WORKED_LENGTHS.sum())  # 8.5 / 16
    assert semantics_row("`minus_length_weighted_mean`") == pytest.approx([r - baseline for r in rewards], abs=5.1e-5)
    advantages, _ = calculate_minus_length_weighted_mean_advantages(WORKED, lengths=WORKED_LENGTHS)
    assert semantics_row("`minus_length_weighted_mean`") == [round(float(a), 4) for a in np.concatenate(advantages)]


@pytest.mark.parametrize("pass_at_k", [0, -1])
def test_a_pass_at_k_below_1_is_refused_on_every_path_not_read_as_1(pass_at_k):
    """One rule: the option k, AlgorithmConfig.pass_at_k and the pass_at_k of any config handed to the estimator (rLLM's own
    AlgorithmConfig, a duck-typed one) all refuse k < 1 (rLLM PR #743 clamps it to 1)."""
    from types import SimpleNamespace

    rewards = [np.array([1.0, 0.0, 1.0])]
    with pytest.raises(ValueError, match=r"k must be at least 1"):
        calculate_pkpo_advantages(rewards, k=pass_at_k)
    with pytest.raises(ValueError, match=r"pass_at_k must be an int >= 1"):
        AlgorithmConfig(estimator="pkpo", pass_at_k=pass_at_k)
    foreign = SimpleNamespace(estimator="pkpo", norm_adv_by_std_in_grpo=True, pass_at_k=pass_at_k)
    with pytest.raises(ValueError, match=r"k must be at least 1, got -?\d \(from algorithm_config.pass_at_k\).*set pass_at_k >= 1"):
        calculate_pkpo_advantages(rewards, foreign)


def _group(rewards):
    return TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1])], reward=r) for r in rewards], group_id="task0")


def test_option_k_and_pass_at_k_that_differ_are_refused_on_every_path_naming_both():
    """Before: pkpo alone was refused, but as a composite term (and in the list form with a config object) the term's k won
    without a word. Equal values run, as either alone does."""
    alone = "AlgorithmConfig.pass_at_k=3 but estimator_kwargs['k']=2; set k in one place"
    term = "estimator 'pkpo': option k=2 but algorithm_config.pass_at_k=3; set k in one place"
    with pytest.raises(ValueError, match=re.escape(alone)):
        AlgorithmConfig(estimator="pkpo", estimator_kwargs={"k": 2}, pass_at_k=3)
    composite = AlgorithmConfig(estimator="composite", estimator_kwargs={"terms": [["pkpo", 1.0, {"k": 2}]]}, pass_at_k=3)
    with pytest.raises(ValueError, match=re.escape(term)):
        collect_reward_and_advantage_from_trajectory_groups([_group([1.0, 0.0, 1.0, 0.0])], composite)
    with pytest.raises(ValueError, match=re.escape(term)):
        get_rllm_adv_estimator("pkpo")([np.array([1.0, 0.0, 1.0])], algorithm_config=AlgorithmConfig(pass_at_k=3), k=2)
    with pytest.raises(ValueError, match=re.escape(term)):
        pkpo(np.array([1.0, 0.0, 1.0]), np.array([0, 3]), k=2, algorithm_config=AlgorithmConfig(pass_at_k=3))
    agreeing = AlgorithmConfig(estimator="composite", estimator_kwargs={"terms": [["pkpo", 1.0, {"k": 2}]]}, pass_at_k=2)
    group = _group([1.0, 0.0, 1.0, 0.0])
    collect_reward_and_advantage_from_trajectory_groups([group], agreeing)
    want = by_subsets([Fraction(1), Fraction(0), Fraction(1), Fraction(0)], 2)
    assert [t.steps[0].advantage for t in group.trajectories] == pytest.approx([float(a - sum(want) / 4) for a in want])
