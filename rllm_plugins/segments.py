"""Segment reductions over flat rewards split into contiguous groups.

A role's groups are stored flat: ``values`` of shape ``(N,)`` and ``offsets`` of shape
``(G + 1,)`` with ``offsets[0] == 0``, ``offsets[-1] == N`` and group ``g`` owning
``values[offsets[g]:offsets[g + 1]]``. Empty groups are allowed and own nothing.

Every function here is vectorised over groups (no Python loop per group); groups of equal
size, the common case in verl and TRL, take a reshape fast path.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = ["GroupLayout", "check_offsets", "offsets_from_sizes", "row_maxima", "row_top_two"]


def offsets_from_sizes(sizes: np.ndarray | list[int]) -> np.ndarray:
    """Group sizes ``(G,)`` -> offsets ``(G + 1,)`` (int64, starting at 0)."""
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return offsets


_SHORT_ROW = 64  # rows up to this length (group sizes) take the short-row reductions below


def _row_sums(rows: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Sum of each row of ``rows`` ``(G, k)`` (times ``weights`` elementwise when given) -> ``(G,)``.

    Short float rows (the group sizes of RL, 2 to 64) go through ``einsum``, several times faster
    than ``ndarray.sum(axis=1)`` there and with no temporary for the products; longer rows keep
    numpy's pairwise summation, which bounds the rounding error of a long sum, and integer rows
    keep ``sum``'s promotion to the platform integer.
    """
    if rows.shape[1] <= _SHORT_ROW and rows.dtype.kind == "f":
        return np.einsum("ij->i", rows) if weights is None else np.einsum("ij,ij->i", rows, weights)
    return rows.sum(axis=1) if weights is None else (rows * weights).sum(axis=1)


def row_maxima(rows: np.ndarray) -> np.ndarray:
    """Maximum of each row of ``rows`` ``(G, k)`` -> ``(G,)`` (NaN propagates, as in ``ndarray.max``).

    Short rows are reduced column by column (k - 1 in-place ``np.maximum`` over ``G`` values),
    an order of magnitude faster than ``ndarray.max(axis=1)`` on rows of 4 to 16.
    """
    if rows.shape[1] > _SHORT_ROW:
        return rows.max(axis=1)
    out = rows[:, 0].copy()
    for j in range(1, rows.shape[1]):
        np.maximum(out, rows[:, j], out=out)
    return out


def row_top_two(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The two largest values of each row of float ``rows`` ``(G, k)``, ``k >= 1``, and where the largest is: ``(best, second, column)``, each ``(G,)``.

    ``best`` is :func:`row_maxima`'s, bit for bit; ``second`` is the largest value once the first maximum is
    removed (``best`` again when the maximum is tied, -inf for rows of one; a tie of 0.0 and -0.0 may give
    either zero); ``column`` (integers) is the first column holding ``best``. NaN propagates to ``best`` and ``second``.
    Short rows are scanned column by column (a few in-place ufuncs over ``G`` values each, no ``(G, k)`` temporary).
    """
    num_rows, k = rows.shape
    if k > _SHORT_ROW:
        column = rows.argmax(axis=1)
        rest = rows.copy()
        rest[np.arange(num_rows), column] = -np.inf
        return rows.max(axis=1), rest.max(axis=1), column
    best = rows[:, 0].copy()
    second = np.full(num_rows, -np.inf, dtype=rows.dtype)
    column = np.zeros(num_rows, dtype=np.int8)  # k <= 64
    value = np.empty(num_rows, dtype=rows.dtype)
    lower = np.empty(num_rows, dtype=rows.dtype)
    raised_at = np.empty(num_rows, dtype=np.int8)
    for j in range(1, k):
        np.copyto(value, rows[:, j])  # one strided read; the four uses below read contiguous memory
        np.minimum(best, value, out=lower)  # the smaller of the two is a candidate for second
        np.maximum(second, lower, out=second)
        np.greater(value, best, out=raised_at.view(np.bool_))  # strictly: a tie keeps the earlier column
        np.multiply(raised_at, np.int8(j), out=raised_at)
        np.maximum(column, raised_at, out=column)  # j exceeds every earlier column
        np.maximum(best, value, out=best)  # row_maxima's steps, in its order
    return best, second, column


def _checked_ends(offsets: np.ndarray | list[int], num_values: int) -> np.ndarray:
    """``offsets`` as a 1-D int64 array ``(G + 1,)`` from 0 to ``num_values`` (its order not checked)."""
    offsets = np.asarray(offsets)
    if offsets.ndim != 1 or offsets.size == 0:
        raise ValueError(f"offsets must be a 1-D array of G + 1 group boundaries, got shape {offsets.shape}")
    if offsets.dtype.kind not in "iu":  # np.integer: signed or unsigned
        raise ValueError(f"offsets must be integers, got dtype {offsets.dtype}")
    offsets = offsets.astype(np.int64, copy=False)
    if offsets[0] != 0 or offsets[-1] != num_values:
        raise ValueError(f"offsets must start at 0 and end at the number of values ({num_values}), got {offsets[0]} .. {offsets[-1]}")
    return offsets


def _refuse_decreasing(sizes: np.ndarray) -> None:
    bad = int(np.argmin(sizes))
    raise ValueError(f"offsets must be non-decreasing; group {bad} has size {int(sizes[bad])}")


def check_offsets(offsets: np.ndarray | list[int], num_values: int) -> None:
    """:meth:`GroupLayout.from_offsets`' checks (same errors) without describing the layout: for statistics over the whole role."""
    offsets = _checked_ends(offsets, num_values)
    if offsets.size > 1 and (offsets[1:] < offsets[:-1]).any():
        _refuse_decreasing(offsets[1:] - offsets[:-1])


@dataclass(frozen=True, eq=False)
class GroupLayout:
    """How ``N`` flat values split into ``G`` contiguous groups.

    Build with :meth:`from_offsets`, which validates; the reductions take ``(N,)`` float
    arrays and return ``(G,)`` per-group statistics, :meth:`expand` maps them back to ``(N,)``.
    """

    offsets: np.ndarray  # (G + 1,) int64
    sizes: np.ndarray  # (G,) int64
    uniform_size: int | None  # k when every group has k >= 1 members, else None

    @classmethod
    def from_offsets(cls, offsets: np.ndarray | list[int], num_values: int) -> GroupLayout:
        """Validate ``offsets`` against ``num_values`` and describe the layout."""
        offsets = _checked_ends(offsets, num_values)
        sizes = offsets[1:] - offsets[:-1]
        if sizes.size and sizes.min() < 0:
            _refuse_decreasing(sizes)
        uniform = None
        if sizes.size and sizes[0] > 0 and num_values == sizes[0] * sizes.size and (sizes == sizes[0]).all():
            uniform = int(sizes[0])
        return cls(offsets=offsets, sizes=sizes, uniform_size=uniform)

    @property
    def num_groups(self) -> int:
        return int(self.sizes.size)

    @property
    def num_values(self) -> int:
        return int(self.offsets[-1])

    @cached_property
    def group_index(self) -> np.ndarray:
        """``(N,)`` index of the group that owns each value."""
        return np.repeat(np.arange(self.num_groups, dtype=np.int64), self.sizes)

    @cached_property
    def _nonempty_starts(self) -> tuple[np.ndarray | None, np.ndarray]:
        """(the non-empty groups, None when every group is, and their first values' positions)."""
        nonempty = np.flatnonzero(self.sizes)
        if nonempty.size == self.sizes.size:
            return None, self.offsets[:-1]
        return nonempty, self.offsets[nonempty]

    def sum(self, values: np.ndarray) -> np.ndarray:
        """Per-group sum ``(G,)``; 0 for empty groups."""
        if self.uniform_size is not None:
            return _row_sums(values.reshape(-1, self.uniform_size))
        nonempty, starts = self._nonempty_starts
        if nonempty is None and starts.size and values.dtype.kind == "f":  # every group non-empty: reduceat's output is the sums
            return np.add.reduceat(values, starts)
        out = np.zeros(self.num_groups, dtype=values.dtype)
        if starts.size:
            out[nonempty] = np.add.reduceat(values, starts)
        return out

    def max(self, values: np.ndarray) -> np.ndarray:
        """Per-group maximum ``(G,)``; -inf for empty groups."""
        if self.uniform_size is not None:
            return row_maxima(values.reshape(-1, self.uniform_size))
        nonempty, starts = self._nonempty_starts
        if nonempty is None and starts.size and values.dtype.kind == "f":
            return np.maximum.reduceat(values, starts)
        out = np.full(self.num_groups, -np.inf, dtype=values.dtype)
        if starts.size:
            out[nonempty] = np.maximum.reduceat(values, starts)
        return out

    def mean(self, values: np.ndarray) -> np.ndarray:
        """Per-group mean ``(G,)`` with one correction pass (exact for constant groups); 0 for empty groups.

        A group whose sum or correction overflows (``[1e308, 1e308, 0]``, ``[1.7e308, -1.7e308, 1.7e308]``) is
        averaged on values scaled by its largest magnitude.
        """
        sizes = np.maximum(self.sizes, 1)
        with np.errstate(over="ignore", invalid="ignore"):  # an overflowed sum is handled below; the check's sum may overflow too
            mean = self.sum(values) / sizes
            mean += self.sum(self._minus(values, mean)) / sizes
            finite = math.isfinite(float(mean.sum())) or np.isfinite(mean).all()  # one sum in the common case
        if not finite:
            return self._rescaled_mean(values, mean, sizes)
        return mean

    def _rescaled_mean(self, values: np.ndarray, mean: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """:meth:`mean` when some group's sum or correction overflowed (finite ``values``): those groups are averaged after scaling."""
        overflowed = ~np.isfinite(mean)
        scale = np.where(overflowed, self.max(np.abs(values)), 1.0)  # > 0 where the sum overflowed
        scaled = values / self.expand(np.where(scale > 0, scale, 1.0))
        scaled_mean = self.sum(scaled) / sizes
        scaled_mean += self.sum(scaled - self.expand(scaled_mean)) / sizes
        return np.where(overflowed, scale * scaled_mean, mean)

    def sum_of_squares(self, values: np.ndarray) -> np.ndarray:
        """Per-group sum of the squares of ``values`` ``(N,)`` -> ``(G,)`` (equal-size groups: without a temporary)."""
        if self.uniform_size is not None:
            rows = values.reshape(-1, self.uniform_size)
            return _row_sums(rows, rows)
        return self.sum(values * values)

    def std(self, values: np.ndarray, mean: np.ndarray | None = None, ddof: int = 0) -> np.ndarray:
        """Per-group standard deviation ``(G,)`` (two-pass; ``ddof=0`` population, 1 sample).

        Groups with ``size - ddof <= 0`` get NaN, as ``np.std`` does. Magnitudes up to the
        float64 range do not overflow: groups whose deviations or their squares overflow are rescaled.
        """
        if mean is None:
            mean = self.mean(values)
        dof = self.sizes - ddof
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            centred = self._minus(values, mean)
            var = self.sum_of_squares(centred) / dof
            std = np.sqrt(var)
            overflowed = np.isinf(std)
            if overflowed.any():  # deviations or their squares beyond the range: both taken on values scaled by the largest
                scale = self.max(np.abs(values))
                scale = np.where(overflowed & (scale > 0), scale, 1.0)
                scaled = values / self.expand(scale) - self.expand(mean / scale)
                rescaled = scale * np.sqrt(self.sum(scaled * scaled) / dof)
                std = np.where(overflowed, rescaled, std)
        return np.where(dof > 0, std, np.nan)

    def _minus(self, values: np.ndarray, per_group: np.ndarray) -> np.ndarray:
        """``values - self.expand(per_group)`` ``(N,)``; equal-size groups broadcast over the rows instead (no ``(N,)`` copy of ``per_group``)."""
        if self.uniform_size is not None:
            return (values.reshape(-1, self.uniform_size) - per_group[:, None]).reshape(-1)
        return values - self.expand(per_group)

    def expand(self, per_group: np.ndarray) -> np.ndarray:
        """Broadcast a per-group ``(G,)`` array to the values ``(N,)`` (a read-only view for a single group)."""
        if self.num_groups == 1:  # a role-level statistic: no (N,) copy of one number
            return np.broadcast_to(per_group, (self.num_values,))
        if self.uniform_size is not None:
            return np.repeat(per_group, self.uniform_size)
        return per_group[self.group_index]

    def split(self, values: np.ndarray) -> list[np.ndarray]:
        """``(N,)`` -> one view per group (the list-of-arrays form)."""
        if self.uniform_size is not None:
            return list(values.reshape(-1, self.uniform_size))
        bounds = self.offsets.tolist()
        return [values[a:b] for a, b in itertools.pairwise(bounds)]
