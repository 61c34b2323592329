"""One rule for which rows form which group in verl's batches: equal ``uid`` values, groups by first appearance.

Every path that groups verl rows (the ``rllm_*`` outcome and step levels, sessions, the transform stage after
verl's own estimators) groups them here, so a uid means one thing everywhere (``"1"`` and ``1`` differ, as in a
dict; NaN uids are refused, naming the row); the groups become a :class:`rllm_plugins.layout.Layout`.
"""

from __future__ import annotations

import numpy as np

from rllm_plugins.segments import offsets_from_sizes

__all__ = ["group_rows"]


def group_rows(index: np.ndarray, rows: np.ndarray | None = None) -> tuple[np.ndarray | None, np.ndarray]:
    """Group rows by equal ``index`` values (``==`` and hash, as a dict does: ``"1"`` and ``"01"`` differ).

    Returns ``(order, offsets)``: ``order`` (B,) int64 puts each group's rows next to each other,
    stable, groups in order of first appearance (None when rows already are contiguous per group);
    ``offsets`` (G + 1,) int64 are the group boundaries in that order. ``rows`` ``(B,)``: the batch row of each
    entry, named in errors (the entries are sessions, say); None: the entries are the rows.
    """
    n = len(index)
    if n == 0:
        return None, np.zeros(1, dtype=np.int64)
    starts = np.flatnonzero(np.not_equal(index[1:], index[:-1])) + 1
    heads = index[np.concatenate(([0], starts))].tolist()
    if len(set(heads)) == len(heads):  # every uid forms a single run: no reordering needed
        offsets = np.concatenate(([0], starts, [n])).astype(np.int64)
        _refuse_nan(heads, offsets, None, rows)
        return None, offsets
    keys = index.tolist()
    code_of = {key: code for code, key in enumerate(dict.fromkeys(keys))}
    group_of_row = np.fromiter(map(code_of.__getitem__, keys), dtype=np.int64, count=n)
    order = np.argsort(group_of_row, kind="stable")
    offsets = offsets_from_sizes(np.bincount(group_of_row, minlength=len(code_of)))
    _refuse_nan(list(code_of), offsets, order, rows)
    return order, offsets


def _refuse_nan(keys: list[object], offsets: np.ndarray, order: np.ndarray | None, rows: np.ndarray | None) -> None:
    """Refuse a NaN uid: it equals no uid, itself included, so its rows would be groups of one (or grouped by identity).

    Contiguous runs (``order`` None) hold a NaN only in runs of one row, so only those are looked at.
    """
    groups = range(len(keys)) if order is not None else np.flatnonzero(np.diff(offsets) == 1).tolist()
    for g in groups:
        if keys[g] != keys[g]:
            row = int(offsets[g] if order is None else order[offsets[g]])
            row = row if rows is None else int(rows[row])
            raise ValueError(f"row {row} has uid {keys[g]!r}, which equals no other id (NaN); give every row a real uid")
