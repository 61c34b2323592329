"""Turns of multi-turn rows: one rule for verl and TRL, as pure array functions.

A row's response mixes model tokens (mask 1) and environment/tool tokens (mask 0)::

    response  | m m m | e e | m m | e e e | m m m m |
    mask      | 1 1 1 | 0 0 | 1 1 | 0 0 0 | 1 1 1 1 |
    turn      |   0   |     |  1  |       |    2    |
    reward of |  turn 0     | turn 1      | turn 2  |   (tokens up to the next turn)
    anchor    | prompt| e e | e e e             (turn k >= 1: the environment tokens right before it)

- a **turn** is a maximal run of model tokens; turns are numbered per row from 0;
- the **reward of turn k** is the sum of the token rewards from its first token up to the next
  turn (turn 0 from the row's first token), so the turn rewards of a row add up to its total;
- the **anchor state of turn k >= 1** is the token ids of the environment segment right before it
  (:class:`~rllm_plugins.steps.anchors.TokenIds`); turn 0's is :data:`PROMPT_ANCHOR`, shared by all rows of one prompt.

Turns are flat, row-major: turn ``j`` of the batch is in row ``row[j]``, tokens ``start[j]:end[j]``;
row ``b`` owns turns ``row_offsets[b]:row_offsets[b + 1]``.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from .anchors import TokenIds

__all__ = ["PROMPT_ANCHOR", "Turns", "find_turns", "spread_to_tokens", "turn_anchor_states", "turn_rewards"]

PROMPT_ANCHOR = "<prompt>"  # the anchor state of every row's first turn


@dataclass(frozen=True)
class Turns:
    """The turns of a ``(B, T)`` batch, flat: ``row``, ``start``, ``end`` ``(K,)`` int64; ``row_offsets`` ``(B + 1,)``."""

    row: np.ndarray
    start: np.ndarray
    end: np.ndarray
    row_offsets: np.ndarray
    length: int  # T

    @property
    def num_turns(self) -> int:
        return int(self.row.size)

    @property
    def per_row(self) -> np.ndarray:
        """``(B,)`` number of turns of each row."""
        return np.diff(self.row_offsets)


def find_turns(mask: np.ndarray) -> Turns:
    """The maximal runs of non-zero entries of each row of ``mask`` ``(B, T)``.

    One pass: position ``j`` of row ``b`` in a ``(B, T + 1)`` array of changes is set where the
    mask differs between tokens ``j - 1`` and ``j`` (token ``-1`` and ``T`` counting as 0), so a
    row's set positions alternate run start, run end; one ``flatnonzero`` finds them all.
    """
    mask = np.asarray(mask)
    if mask.ndim != 2:
        raise ValueError(f"the mask of model tokens must be 2-D (batch, response_length), got shape {mask.shape}")
    mask = mask if mask.dtype == bool else mask != 0
    rows, length = mask.shape
    change = np.empty((rows, length + 1), dtype=bool)
    if length:
        change[:, 0] = mask[:, 0]
        change[:, -1] = mask[:, -1]
        np.not_equal(mask[:, 1:], mask[:, :-1], out=change[:, 1:-1])
    else:
        change[:] = False
    row, col = np.divmod(np.flatnonzero(change), length + 1)
    row_offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(row[0::2], minlength=rows), out=row_offsets[1:])
    return Turns(row[0::2].astype(np.int64), col[0::2].astype(np.int64), col[1::2].astype(np.int64), row_offsets, length)


def _segment_starts(turns: Turns) -> np.ndarray:
    """``(K,)`` flat (row-major) index where each turn's reward segment starts: its first token, 0 for a row's first turn."""
    first = np.zeros(turns.num_turns, dtype=bool)
    first[turns.row_offsets[:-1][turns.per_row > 0]] = True
    return turns.row * turns.length + np.where(first, 0, turns.start)


def turn_rewards(token_rewards: np.ndarray, turns: Turns) -> np.ndarray:
    """``(K,)`` reward of each turn: the token rewards ``(B, T)`` from the turn's first token up to the next turn.

    Rows without turns contribute nothing (the caller refuses them). Summed in the rewards' dtype
    (float64 for integers), with numpy's ``add.reduceat``.
    """
    flat = np.ascontiguousarray(token_rewards).reshape(-1)
    if flat.dtype.kind != "f":
        flat = flat.astype(np.float64)
    if turns.num_turns == 0:
        return np.zeros(0)
    starts = _segment_starts(turns)
    sums = np.add.reduceat(flat, starts).astype(np.float64)
    # a row's last turn runs to the row's end, not into the next row's first segment
    last = turns.row_offsets[1:][turns.per_row > 0] - 1
    row_ends = (turns.row[last] + 1) * turns.length
    following = np.append(starts[1:], flat.size)
    spill = following[last] > row_ends
    if spill.any():
        for j, stop in zip(last[spill].tolist(), row_ends[spill].tolist(), strict=True):
            sums[j] = float(flat[starts[j] : stop].sum(dtype=np.float64 if flat.dtype.itemsize < 4 else flat.dtype))
    return sums


def turn_anchor_states(tokens: np.ndarray, turns: Turns) -> list[Hashable]:
    """``(K,)`` anchor state of each turn: :data:`PROMPT_ANCHOR` for a row's first turn, else the ids ``(B, T)`` right before it (:class:`TokenIds`)."""
    tokens = np.asarray(tokens).astype(np.int64, copy=False)
    width = tokens.dtype.itemsize
    states: list[Hashable] = []
    starts, ends = turns.start.tolist(), turns.end.tolist()
    bounds = turns.row_offsets.tolist()
    for row, (first, last) in enumerate(itertools.pairwise(bounds)):
        if first == last:
            continue
        states.append(PROMPT_ANCHOR)
        if last - first == 1:
            continue
        begin = ends[first]
        line = tokens[row, begin : starts[last - 1]].tobytes()  # one copy per row, of the span between its turns only; turns slice it
        states.extend(TokenIds(line[(ends[j - 1] - begin) * width : (starts[j] - begin) * width]) for j in range(first + 1, last))
    return states


def spread_to_tokens(per_turn: np.ndarray, turns: Turns, dtype: np.dtype | type = np.float32) -> np.ndarray:
    """``(B, T)`` array where every model token of turn ``j`` holds ``per_turn[j]`` ``(K,)`` and every other token 0.

    One slice assignment per turn: the output is the only ``(B, T)`` allocation.
    """
    out = np.zeros((turns.row_offsets.size - 1, turns.length), dtype=dtype)
    for row, start, end, value in zip(turns.row.tolist(), turns.start.tolist(), turns.end.tolist(), np.asarray(per_turn).tolist(), strict=True):
        out[row, start:end] = value
    return out
