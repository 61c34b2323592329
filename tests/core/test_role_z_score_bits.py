"""prpo's role z-score is the two-pass mean and population std bit for bit, at every size.

The reference is written plainly with numpy's own pairwise sums (``np.add.reduce``): the mean with one correction pass,
the deviations from it, their squares summed, then ``(v - mean) / (std + eps)``. Sizes straddle the blocks in which numpy
sums long arrays, and the data include roles whose mean the correction moves (the output re-centred) and roles where it
does not.
"""

from __future__ import annotations

import numpy as np
import pytest

from rllm_plugins.estimators.prpo import prpo
from rllm_plugins.segments import GroupLayout

SIZES = [65, 1_000, 65_536, 65_537, 2 * 65_536 + 8, 131_084, 262_147, 300_013, 1_000_000]


def plain_mean(values: np.ndarray) -> float:
    first = np.add.reduce(values) / values.size
    return first + np.add.reduce(values - first) / values.size


def plain_z(values: np.ndarray, eps: float) -> np.ndarray:
    centred = values - plain_mean(values)
    std = np.sqrt(np.add.reduce(centred * centred) / values.size)
    return centred / (std + eps)


def roles(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(n)
    return [
        rng.normal(size=n),
        rng.integers(0, 2, size=n) + rng.normal(0.0, 0.1, size=n),
        rng.normal(size=n) * 1e150,  # squares near 1e300
        rng.normal(size=n) * 1e6 + 1e12,
        np.full(n, 0.1),  # equal rewards: exactly 0
    ]


def bits(values: np.ndarray) -> list[int]:
    return values.view(np.int64).tolist()


@pytest.mark.parametrize("n", SIZES)
def test_prpo_is_the_plain_two_pass_z_score_bit_for_bit(n):
    for values in roles(n):
        for eps in (1e-6, 1e-4):
            got = prpo(values, np.array([0, 1, n]), epsilon=eps)  # any groups: one statistic over the role
            assert bits(got) == bits(plain_z(values, eps)), (n, float(values[0]), eps)
    assert bits(prpo(np.full(n, 0.1), np.array([0, n]), epsilon=0.0)) == [0] * n


def test_the_data_cover_a_moved_and_an_unmoved_mean():
    moved = set()
    for n in SIZES:
        for values in roles(n):
            first = np.add.reduce(values) / n
            moved.add(bool(plain_mean(values) != first))
    assert moved == {True, False}


@pytest.mark.parametrize("n", SIZES)
def test_one_groups_sum_of_squares_is_numpys_pairwise_sum(n):
    rng = np.random.default_rng(n + 1)
    wide = rng.normal(size=2 * n) * 1e-3
    for values in (wide[:n], wide[::2]):  # contiguous and strided
        assert GroupLayout.from_offsets([0, n], n).sum_of_squares(values)[0] == np.add.reduce(values * values)


def test_prpo_refuses_decreasing_offsets_as_every_estimator_does():
    with pytest.raises(ValueError, match="offsets must be non-decreasing; group 1 has size -2"):
        prpo(np.zeros(4), np.array([0, 3, 1, 4]))
    with pytest.raises(ValueError, match=r"offsets must start at 0 and end at the number of values \(4\), got 0 .. 3"):
        prpo(np.zeros(4), np.array([0, 3]))
