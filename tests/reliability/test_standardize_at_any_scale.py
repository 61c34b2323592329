"""Standardising estimators give the true advantages at any scale where those fit float64, against 50-digit decimals.

``(v - mean) / (std + eps)`` is at most ``sqrt(n - 1)`` in magnitude for any finite rewards, but its parts overflow:
squared deviations from about 1e154, the deviation itself for ``[1.7e308, -1.7e308, 1.7e308]``. Before, turn_grpo's
per-turn part silently vanished from 1e155 (its variance overflowed to inf, so it divided by inf), trl_grpo gave 0 to
a group near the range, and grpo, prpo, REINFORCE++-baseline and trl_grpo_batch gave NaN or -inf, refused.
"""

from __future__ import annotations

import itertools
import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest

from rllm_plugins.aggregation import whiten
from rllm_plugins.estimators import (
    calculate_gigpo_advantages,
    calculate_grpo_advantages,
    calculate_pkpo_advantages,
    calculate_prpo_advantages,
    calculate_reinforce_plus_plus_baseline_advantages,
    calculate_step_reinforce_advantages,
    calculate_trl_grpo_advantages,
    calculate_trl_grpo_batch_advantages,
    calculate_turn_grpo_advantages,
    calculate_verl_grpo_advantages,
)

SCALES = [1e150, 1e155, 1e200, 1e300, 1e307, 1.7e308]
STEP_SCALES = [1e150, 1e155, 1e200, 1e300, 1e307, 1.4e308]  # every discounted return of STEP_REWARDS fits float64
BASE = [[1.0, -1.0, 1.0], [0.25, 1.0, 0.5, 0.0]]  # the first gives deviations beyond the range at 1.7e308


def dec(x: float) -> Decimal:
    return Decimal(x)  # exact


def mean(xs: list[Decimal]) -> Decimal:
    return sum(xs, Decimal(0)) / len(xs)


def std(xs: list[Decimal], ddof: int) -> Decimal:
    m = mean(xs)
    return (sum(((x - m) ** 2 for x in xs), Decimal(0)) / (len(xs) - ddof)).sqrt()


def z(xs: list[Decimal], *, ddof: int = 0, eps: float = 1e-6, single: str = "unit") -> list[Decimal]:
    """(x - mean) / (std + eps); a group of one: x / (1 + eps) ("unit") or 0 ("zero")."""
    if len(xs) == 1:
        return [xs[0] / (1 + dec(eps))] if single == "unit" else [Decimal(0)]
    m, s = mean(xs), std(xs, ddof)
    return [(x - m) / (s + dec(eps)) for x in xs]


def floats(groups: list[list[Decimal]]) -> list[float]:
    return [float(x) for g in groups for x in g]


def scaled(scale: float) -> list[np.ndarray]:
    return [np.array(g) * scale for g in BASE]


def got(result) -> list[float]:
    return np.concatenate(result[0]).tolist()


def got_steps(result) -> list[float]:
    return np.concatenate([traj for group in result[0] for traj in group]).tolist()


OUTCOME_REFERENCES = {
    "grpo": (calculate_grpo_advantages, lambda gs: floats([z(g) for g in gs])),
    "verl_grpo": (calculate_verl_grpo_advantages, lambda gs: floats([z(g, ddof=1) for g in gs])),
    "trl_grpo": (calculate_trl_grpo_advantages, lambda gs: floats([z(g, ddof=1, eps=1e-4, single="zero") for g in gs])),
    "trl_grpo_batch": (
        calculate_trl_grpo_batch_advantages,
        lambda gs: floats([[(x - mean(g)) / (std([y for h in gs for y in h], 1) + dec(1e-4)) for x in g] for g in gs]),
    ),
    "prpo": (calculate_prpo_advantages, lambda gs: floats([z([y for h in gs for y in h], single="zero")])),
    "reinforce_plus_plus_baseline": (
        calculate_reinforce_plus_plus_baseline_advantages,
        lambda gs: floats([z([x - mean(g) for g in gs for x in g])]),
    ),
}


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("name", sorted(OUTCOME_REFERENCES))
def test_outcome_standardisations_are_exact_at_any_scale(name, scale):
    estimator, reference = OUTCOME_REFERENCES[name]
    with localcontext() as ctx:
        ctx.prec = 50
        want = reference([[dec(x) for x in g] for g in scaled(scale)])
    assert got(estimator(scaled(scale))) == pytest.approx(want, rel=1e-12, abs=1e-300)


def plain_returns(rewards: list[Decimal]) -> list[Decimal]:
    out, running = [], Decimal(0)
    for r in reversed(rewards):
        running += r
        out.append(running)
    return out[::-1]


# one task group: three trajectories of 2, 1 and 3 turns (outcomes small, step rewards at the scale)
OUTCOMES = [1.0, 0.0, 0.5]
STEP_REWARDS = [[1.0, -0.5], [0.25], [-1.0, 0.75, 0.5]]


def turn_grpo_reference(rewards: list[list[Decimal]], *, value: str, ended: str, lam: float) -> list[float]:
    """Episode GRPO plus lam times the step's value against its turn's population (absent trajectories 0 when absorbing)."""
    episode = z([dec(o) for o in OUTCOMES])
    values = [plain_returns(r) if value == "return" else r for r in rewards]
    out = []
    for i, traj in enumerate(values):
        for t, v in enumerate(traj):
            absorbing = [w[t] if t < len(w) else Decimal(0) for w in values]
            members = absorbing if ended == "absorbing" else [w[t] for w in values if t < len(w)]
            per_turn = Decimal(0) if len(members) == 1 else (v - mean(members)) / (std(members, 0) + dec(1e-6))
            out.append(float(episode[i] + dec(lam) * per_turn))
    return out


@pytest.mark.parametrize("scale", STEP_SCALES)
@pytest.mark.parametrize("ended", ["absorbing", "present"])
@pytest.mark.parametrize("value", ["reward", "return"])
def test_turn_grpo_keeps_its_per_turn_part_at_any_scale(scale, ended, value):
    rewards = [[x * scale for x in r] for r in STEP_REWARDS]
    with localcontext() as ctx:
        ctx.prec = 50
        want = turn_grpo_reference([[dec(x) for x in r] for r in rewards], value=value, ended=ended, lam=0.5)
    result = calculate_turn_grpo_advantages([np.array(OUTCOMES)], [rewards], value=value, ended=ended, lam=0.5)
    assert got_steps(result) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("scale", STEP_SCALES)
def test_gigpo_and_step_reinforce_are_exact_at_any_scale(scale):
    rewards = [[x * scale for x in r] for r in STEP_REWARDS]
    anchors = [[0, 1], [0], [0, 1, 1]]
    with localcontext() as ctx:
        ctx.prec = 50
        returns = [plain_returns([dec(x) for x in r]) for r in rewards]
        flat = [g for r in returns for g in r]
        episode = z([dec(o) for o in OUTCOMES])
        by_anchor = {a: [g for r, ar in zip(returns, anchors, strict=True) for g, b in zip(r, ar, strict=True) if b == a] for a in (0, 1)}
        step = [z(by_anchor[a], single="zero")[by_anchor[a].index(g)] for r, ar in zip(returns, anchors, strict=True) for g, a in zip(r, ar, strict=True)]
        gigpo = [float(episode[i] + s) for i, s in zip([0, 0, 1, 2, 2, 2], step, strict=True)]
        reinforce = floats([z(flat)])
    assert got_steps(calculate_gigpo_advantages([OUTCOMES], [rewards], [anchors])) == pytest.approx(gigpo, rel=1e-12)
    assert got_steps(calculate_step_reinforce_advantages([OUTCOMES], [rewards])) == pytest.approx(reinforce, rel=1e-12)
    roll = calculate_step_reinforce_advantages([OUTCOMES], [rewards], std_ddof=1, min_std=1e-6)  # ROLL's min_std reads a std too
    assert got_steps(roll) == pytest.approx(floats([z(flat, ddof=1)]), rel=1e-12)


def pkpo_brute_force(rewards: list[float], k: int) -> list[float]:
    """Each trajectory's credit: the max of every k-subset holding it, over C(n, k); centred on the group mean (exact)."""
    n = len(rewards)
    credit = [Fraction(0)] * n
    for subset in itertools.combinations(range(n), k):
        best = max(Fraction(rewards[j]) for j in subset)
        for i in subset:
            credit[i] += best / math.comb(n, k)
    centre = sum(credit) / n
    return [float(c - centre) for c in credit]


def test_pkpo_at_the_readmes_scale_gives_zero():
    assert calculate_pkpo_advantages([np.array([1e308, 1e308, 0.0])], k=2)[0][0].tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("scale", [1.0, 1e200, 1e307, 1.7e308])
@pytest.mark.parametrize("seed", range(3))
def test_pkpo_matches_brute_force_at_any_scale(scale, seed):
    rng = np.random.default_rng(seed)
    rows = [rng.choice([-1.0, 0.0, 0.5, 1.0], n) * scale for n in (3, 5, 6)]
    for row in rows:
        for k in range(1, row.size):
            want = pkpo_brute_force(row.tolist(), k)
            assert calculate_pkpo_advantages([row], k=k)[0][0].tolist() == pytest.approx(want, rel=1e-12, abs=1e-15 * scale)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_pkpo_tied_rewards_get_bit_identical_credit(k):
    rng = np.random.default_rng(7)
    for _ in range(200):
        row = rng.choice([0.1, 0.3, 0.7, 1.0 / 3.0], 8)
        advantage = calculate_pkpo_advantages([row], k=k)[0][0]
        for value in set(row.tolist()):
            assert len(set(advantage[row == value].tolist())) == 1, (row, value, advantage)


@pytest.mark.parametrize("scale", SCALES)
def test_gdpo_whitening_is_exact_at_any_scale(scale):
    """normalize_then_sum's whitening of the summed advantages: (x - mean) / (sample std + eps) over all of them."""
    values = np.concatenate(scaled(scale))
    with localcontext() as ctx:
        ctx.prec = 50
        want = floats([z([dec(x) for x in values], ddof=1)])
    assert whiten(values).tolist() == pytest.approx(want, rel=1e-12)
