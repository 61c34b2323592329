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
  (as bytes); turn 0's is :data:`PROMPT_ANCHOR`, shared by all rows of one prompt.

Turns are flat, row-major: turn ``j`` of the batch is in row ``row[j]``, tokens ``start[j]:end[j]``;
row ``b`` owns turns ``row_offsets[b]:row_offsets[b + 1]``.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

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
    """The maximal runs of non-zero entries of each row of ``mask`` ``(B, T)``."""
    mask = np.asarray(mask) != 0
    if mask.ndim != 2:
        raise ValueError(f"the mask of model tokens must be 2-D (batch, response_length), got shape {mask.shape}")
    starts = mask.copy()
    starts[:, 1:] &= ~mask[:, :-1]
    ends = mask.copy()
    ends[:, :-1] &= ~mask[:, 1:]
    row, start = np.nonzero(starts)
    _, last = np.nonzero(ends)
    row_offsets = np.zeros(mask.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=mask.shape[0]), out=row_offsets[1:])
    return Turns(row.astype(np.int64), start.astype(np.int64), last.astype(np.int64) + 1, row_offsets, mask.shape[1])


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
    """``(K,)`` anchor state of each turn: :data:`PROMPT_ANCHOR` for a row's first turn, else the bytes of the tokens ``(B, T)`` right before it."""
    tokens = np.ascontiguousarray(tokens)
    states: list[Hashable] = []
    previous_end = 0
    first_turns = set(turns.row_offsets[:-1].tolist())
    for j, (row, start) in enumerate(zip(turns.row.tolist(), turns.start.tolist(), strict=True)):
        states.append(PROMPT_ANCHOR if j in first_turns else tokens[row, previous_end:start].tobytes())
        previous_end = int(turns.end[j])
    return states


def spread_to_tokens(per_turn: np.ndarray, turns: Turns, mask: np.ndarray, dtype: np.dtype | type = np.float32) -> np.ndarray:
    """``(B, T)`` array where every model token of turn ``j`` holds ``per_turn[j]`` ``(K,)`` and every other token 0."""
    mask = np.asarray(mask) != 0
    starts = mask.copy()
    starts[:, 1:] &= ~mask[:, :-1]
    index = np.cumsum(starts, axis=1, dtype=np.int32)  # int32: half the memory of int64 at (B, T)
    index += (turns.row_offsets[:-1] - 1).astype(np.int32)[:, None]
    np.clip(index, 0, max(turns.num_turns - 1, 0), out=index)
    out = np.asarray(per_turn, dtype=dtype)[index] if turns.num_turns else np.zeros(mask.shape, dtype=dtype)
    out[~mask] = 0
    return out
