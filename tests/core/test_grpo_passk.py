"""grpo_passk and its row reduction against a plain per-group Python statement of the formula, on hostile groups.

Equal-size groups take the (G, k) row path, other layouts (ragged, with empty groups) the general one; both are
held to the same reference: only the first best of a group is credited with (best - second best) / (std + eps),
a tie (0.0 against -0.0 included) gives +0.0, a group of one or none gives 0.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from rllm_plugins.estimators.grpo_passk import grpo_passk
from rllm_plugins.segments import GroupLayout, offsets_from_sizes, row_maxima, row_top_two

UNIFORM_SIZES = [1, 2, 3, 4, 5, 8, 16, 17, 64, 65, 100]  # 65 and 100: the long-row path
KINDS = ["normal", "binary", "small_ints", "signed_zeros", "zeros_and_ones", "all_equal", "negative", "huge"]


def exact_population_std(group: list[float]) -> float:
    scale = Fraction(max(abs(v) for v in group))  # the deviations may exceed the float64 range, the largest value does not
    if scale == 0:
        return 0.0
    mean = sum(Fraction(v) for v in group) / len(group)
    variance = sum((Fraction(v) - mean) ** 2 for v in group) / len(group)
    return float(scale) * math.sqrt(float(variance / scale**2))  # sqrt of a number in [0, 4]: no overflow


def reference_passk(group: list[float], norm: bool, epsilon: float) -> list[float]:
    out = [0.0] * len(group)
    if len(group) < 2:
        return out
    best = max(group)
    winner = group.index(best)  # the first best (== does not tell 0.0 from -0.0)
    second = max(group[:winner] + group[winner + 1 :])
    gap = best - second if best != second else 0.0
    if norm:
        divisor = exact_population_std(group) + epsilon
        gap = gap / divisor if divisor > 0 else 0.0  # epsilon 0 and no spread: 0 / 0 counts as 0
    out[winner] = gap
    return out


def draw_values(rng: np.random.Generator, kind: str, sizes: list[int]) -> np.ndarray:
    n = sum(sizes)
    if kind == "normal":
        return rng.normal(size=n) * 10.0 ** int(rng.integers(-100, 300))  # spreads below ~1e-154: the std's squares underflow
    if kind == "binary":
        return rng.integers(0, 2, n).astype(np.float64)
    if kind == "small_ints":
        return rng.integers(-2, 3, n).astype(np.float64)
    if kind == "signed_zeros":
        return rng.choice([0.0, -0.0], n)
    if kind == "zeros_and_ones":
        return rng.choice([0.0, -0.0, 1.0, -1.0], n)
    if kind == "all_equal":
        return np.repeat(rng.choice([0.0, -0.0, 0.5, -3.0, 1e300]), n)
    if kind == "negative":
        return -np.abs(rng.normal(size=n)) - rng.integers(0, 2, n)
    return rng.choice([1e300, -1e300, 1.7e308, -1.7e308, 0.0, 1e-100], n)  # huge


def draw_sizes(rng: np.random.Generator, uniform: bool) -> list[int]:
    if uniform:
        return [int(rng.choice(UNIFORM_SIZES))] * int(rng.integers(1, 30))
    sizes = rng.integers(0, 10, int(rng.integers(1, 20))).tolist()
    return [*sizes, 0] if len(set(sizes)) == 1 else sizes  # an empty group: never an equal-size layout


def assert_same_floats(actual: np.ndarray, expected: np.ndarray, rtol: float) -> None:
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=0)
    assert np.signbit(actual).tolist() == np.signbit(expected).tolist()  # +0.0 where the reference has +0.0


@pytest.mark.parametrize("uniform", [True, False], ids=["equal_sizes", "ragged"])
@pytest.mark.parametrize("kind", KINDS)
def test_grpo_passk_matches_the_per_group_formula(kind: str, uniform: bool) -> None:
    rng = np.random.default_rng([KINDS.index(kind), uniform])
    for _ in range(40):
        sizes = draw_sizes(rng, uniform)
        values = draw_values(rng, kind, sizes)
        offsets = offsets_from_sizes(sizes)
        assert (GroupLayout.from_offsets(offsets, values.size).uniform_size is not None) == uniform
        groups = [g.tolist() for g in np.split(values, offsets[1:-1])]
        for norm in (True, False):
            for epsilon in (1e-6, 0.0):
                with np.errstate(over="ignore"):  # 1.7e308 - -1.7e308 is inf, in the reference too
                    actual = grpo_passk(values, offsets, norm_adv_by_std_in_grpo=norm, epsilon=epsilon)
                expected = np.array([a for g in groups for a in reference_passk(g, norm, epsilon)])
                if norm:
                    assert_same_floats(actual, expected, rtol=1e-13)
                else:
                    assert actual.tobytes() == expected.tobytes(), (sizes, values, actual, expected)


@pytest.mark.parametrize(
    ("sizes", "uniform_size"),
    [([2, 2, 2, 2], 2), ([1, 3, 2, 2], None), ([3, 1, 2, 2], None), ([0, 4, 4], None), ([4, 4, 0], None), ([3], 3), ([5, 5, 5, 6], None)],
)
def test_only_groups_of_one_size_take_the_row_path(sizes: list[int], uniform_size: int | None) -> None:
    assert GroupLayout.from_offsets(offsets_from_sizes(sizes), sum(sizes)).uniform_size == uniform_size


@pytest.mark.parametrize("k", [2, 4, 16])
def test_the_equal_size_path_and_the_general_path_give_the_same_bits(k: int) -> None:
    rng = np.random.default_rng(k)
    values = rng.choice([0.0, -0.0, 1.0, -1.0, 0.5], 200 * k)
    offsets = np.arange(0, values.size + 1, k)
    ragged = np.append(offsets, values.size)  # one more group, empty: the general path, the same values
    assert GroupLayout.from_offsets(ragged, values.size).uniform_size is None
    expected = grpo_passk(values, ragged, norm_adv_by_std_in_grpo=False)
    assert grpo_passk(values, offsets, norm_adv_by_std_in_grpo=False).tobytes() == expected.tobytes()


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        ([[2.0, 2.0, 1.0]], [[0.0, 0.0, 0.0]]),  # a tied best: the first is credited with gap 0
        ([[1.0, 3.0, 3.0, 0.0], [5.0, 5.0, 5.0, 5.0]], [[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]),
        ([[-0.0, 0.0], [0.0, -0.0]], [[0.0, 0.0], [0.0, 0.0]]),
        ([[-5.0, -1.0, -3.0]], [[0.0, 2.0, 0.0]]),
        ([[7.0], [1.0]], [[0.0], [0.0]]),
    ],
)
def test_grpo_passk_gaps_on_written_out_groups(groups: list[list[float]], expected: list[list[float]]) -> None:
    values = np.array([v for g in groups for v in g])
    actual = grpo_passk(values, offsets_from_sizes([len(g) for g in groups]), norm_adv_by_std_in_grpo=False)
    assert actual.tobytes() == np.array([v for g in expected for v in g]).tobytes()  # +0.0, never -0.0


def test_grpo_passk_of_no_values_is_empty() -> None:
    assert grpo_passk(np.zeros(0), np.array([0])).shape == (0,)
    assert grpo_passk(np.zeros(0), np.array([0, 0, 0])).shape == (0,)


@pytest.mark.parametrize("k", UNIFORM_SIZES)
def test_row_top_two_against_a_plain_loop_over_rows(k: int) -> None:
    rng = np.random.default_rng(100 + k)
    for pool in ([0.0, -0.0], [0.0, -0.0, 1.0, -1.0], [3.0, 2.0, 1.0], [1e300, -1e300, -0.0]):
        rows = rng.choice(pool, (50, k))
        best, second, column = row_top_two(rows)
        assert best.tobytes() == row_maxima(rows).tobytes()
        for r, row in enumerate(rows.tolist()):
            first = row.index(max(row))
            assert column[r] == first
            assert second[r] == (max(row[:first] + row[first + 1 :]) if k > 1 else -math.inf)


@pytest.mark.parametrize("sizes", [[3, 4, 2], [4, 4, 4], [70, 70], [1, 5, 0, 3]])
def test_a_group_holding_nan_gets_nan_at_one_of_its_rows_and_leaves_the_others_as_they_are(sizes: list[int]) -> None:
    """Called directly (the run refuses NaN rewards first): ragged, equal short and equal long groups alike give NaN in the
    NaN group only, never an index error, and every other group its NaN-free numbers."""
    rng = np.random.default_rng(sum(sizes))
    values = rng.standard_normal(sum(sizes))
    offsets = offsets_from_sizes(np.array(sizes))
    nan_group = 1
    lo, hi = int(offsets[nan_group]), int(offsets[nan_group + 1])
    clean = grpo_passk(values, offsets)
    values[lo + (hi - lo) // 2] = np.nan
    got = grpo_passk(values, offsets)
    assert np.isnan(got[lo:hi]).sum() == 1
    others = np.r_[0:lo, hi : values.size]
    assert np.array_equal(got[others], clean[others])
