"""How a batch's rows form units in groups: the one description every adapter builds once per batch and every stage reads.

A framework hands over rows (verl's ``DataProto`` rows, TRL's completions); rLLM's estimators compare units
(trajectories: a row, or a session of several outputs) within groups (the answers to one prompt). A
:class:`Layout` says which rows form which unit and which units form which group, in the order the estimator sees
them; the estimator, the transforms and the spread back to rows all read it, so none re-derives the grouping.

- ``rows`` ``(R,)`` int64: the rows that belong to a unit, in group, unit and output order (padding rows, which belong
  to none, are left out);
- ``row_offsets`` ``(N + 1,)``: unit ``u`` holds ``rows[row_offsets[u]:row_offsets[u + 1]]``;
- ``unit_offsets`` ``(G + 1,)``: group ``g`` holds units ``unit_offsets[g]:unit_offsets[g + 1]``;
- ``final_rows`` ``(N,)``: the row whose reward is each unit's outcome (a session's final output);
- ``num_rows``: the batch's rows, padding included; ``identity``: every row its own unit, in the rows' own order (the
  common batch: then nothing is gathered or scattered).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .segments import offsets_from_sizes

__all__ = ["Layout"]


@dataclass(frozen=True)
class Layout:
    """Rows → units → groups of one batch (see the module docstring)."""

    rows: np.ndarray
    row_offsets: np.ndarray
    unit_offsets: np.ndarray
    final_rows: np.ndarray
    num_rows: int
    identity: bool = False

    @classmethod
    def one_row_each(cls, order: np.ndarray | None, offsets: np.ndarray, num_rows: int) -> Layout:
        """Every row its own unit; ``order`` ``(B,)`` (None: the rows' own order) puts the groups ``offsets`` ``(G + 1,)`` together."""
        rows = np.arange(num_rows) if order is None else order
        return cls(rows, np.arange(num_rows + 1, dtype=np.int64), offsets, rows, num_rows, identity=order is None)

    @classmethod
    def from_sessions(cls, unit_of_row: np.ndarray, output_index: np.ndarray, final_rows: np.ndarray, order: np.ndarray | None, offsets: np.ndarray) -> Layout:
        """Units of several rows each: ``unit_of_row`` ``(B,)`` (units numbered ``0..N-1``), each unit's rows in ``output_index``
        order, its ``final_rows`` ``(N,)``; ``order`` ``(N,)`` (None: the units' own order) puts the groups ``offsets`` together."""
        units = final_rows.size
        unit_order = np.arange(units) if order is None else order
        rank = np.empty(units, dtype=np.int64)
        rank[unit_order] = np.arange(units)
        rows = np.lexsort((output_index, rank[unit_of_row]))
        row_offsets = offsets_from_sizes(np.bincount(unit_of_row, minlength=units)[unit_order])
        return cls(rows, row_offsets, offsets, final_rows[unit_order], unit_of_row.size)

    @property
    def num_units(self) -> int:
        return self.final_rows.size

    def per_unit(self, per_row: np.ndarray) -> np.ndarray:
        """``(N,)`` the sum of ``per_row`` ``(B,)`` over each unit's rows (a unit's tokens from its rows' tokens)."""
        if self.identity:
            return per_row
        if self.rows.size == self.num_units:  # one row per unit: a gather, no sum
            return np.asarray(per_row, dtype=np.float64)[self.rows]
        return np.add.reduceat(np.asarray(per_row, dtype=np.float64)[self.rows], self.row_offsets[:-1]) if self.num_units else np.zeros(0)

    def to_rows(self, per_unit: np.ndarray) -> np.ndarray:
        """``(B,)`` float64: each row its unit's value of ``per_unit`` ``(N,)``; 0 for a row in no unit."""
        if self.identity:
            return per_unit
        out = np.zeros(self.num_rows)
        out[self.rows] = np.repeat(np.asarray(per_unit, dtype=np.float64), np.diff(self.row_offsets))
        return out

    def keeping_units(self, keep: np.ndarray) -> Layout:
        """Only the units where ``keep`` ``(N,)`` bool is True (their rows with them); groups left empty are dropped."""
        if keep.all():
            return self
        sizes = np.diff(self.row_offsets)
        group_of_unit = np.repeat(np.arange(self.unit_offsets.size - 1), np.diff(self.unit_offsets))
        per_group = np.bincount(group_of_unit[keep], minlength=self.unit_offsets.size - 1)
        rows = self.rows[np.repeat(keep, sizes)]
        return Layout(rows, offsets_from_sizes(sizes[keep]), offsets_from_sizes(per_group[per_group > 0]), self.final_rows[keep], self.num_rows)

    def keeping_live_groups(self, live: np.ndarray) -> Layout:
        """Without the groups none of whose units is ``live`` ``(N,)`` bool (verl's padding: groups of rows without a model
        token, in no statistic); a unit that is not live in a group with a live one stays (verl's own estimators count it)."""
        if live.all():
            return self
        group_of_unit = np.repeat(np.arange(self.unit_offsets.size - 1), np.diff(self.unit_offsets))
        group_live = np.bincount(group_of_unit, weights=live, minlength=self.unit_offsets.size - 1) > 0
        return self.keeping_units(group_live[group_of_unit])

    def keeping_rows(self, keep: np.ndarray) -> Layout:
        """Only the rows where ``keep`` ``(B,)`` bool is True; units and groups left empty are dropped (their outcomes too)."""
        kept = keep[self.rows]
        if kept.all():
            return self
        units = self.num_units
        unit_of = np.repeat(np.arange(units), np.diff(self.row_offsets))
        rows_per_unit = np.bincount(unit_of[kept], minlength=units)
        live = rows_per_unit > 0
        group_of_unit = np.repeat(np.arange(self.unit_offsets.size - 1), np.diff(self.unit_offsets))
        per_group = np.bincount(group_of_unit[live], minlength=self.unit_offsets.size - 1)
        unit_offsets = offsets_from_sizes(per_group[per_group > 0])
        return Layout(self.rows[kept], offsets_from_sizes(rows_per_unit[live]), unit_offsets, self.final_rows[live], self.num_rows)

    def reordered(self, order: np.ndarray, unit_offsets: np.ndarray | None = None) -> Layout:
        """The units in ``order`` ``(N,)``, grouped by ``unit_offsets`` (None: a permutation within each group, which keeps
        its bounds)."""
        sizes = np.diff(self.row_offsets)
        if sizes.size and (sizes == 1).all():
            rows = self.rows[order]
        else:
            parts = [self.rows[self.row_offsets[u] : self.row_offsets[u + 1]] for u in order.tolist()]
            rows = np.concatenate(parts) if parts else self.rows
        offsets = self.unit_offsets if unit_offsets is None else unit_offsets
        return Layout(rows, offsets_from_sizes(sizes[order]), offsets, self.final_rows[order], self.num_rows)

    @property
    def continuing_rows(self) -> np.ndarray:
        """The rows that are not the first of their unit (later outputs of a session)."""
        first = np.zeros(self.rows.size, dtype=bool)
        first[self.row_offsets[:-1][np.diff(self.row_offsets) > 0]] = True
        return self.rows[~first]
