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

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .anchors import TokenIds

__all__ = ["PROMPT_ANCHOR", "Turns", "coded_states", "find_turns", "spread_to_tokens", "turn_anchor_codes", "turn_anchor_states", "turn_rewards"]

PROMPT_ANCHOR = "<prompt>"  # the anchor state of every row's first turn
_BLOCK_ENTRIES = 1 << 17  # mask entries per block of rows in find_turns: its bool temporaries stay in a core's L2 cache
_HASH_SEED = 0x5EED  # of the multipliers that hash environment segments (collisions are caught: codes stay exact)


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

    One read of the mask, in blocks of rows that stay in cache (no ``(B, T)`` temporary): in a block's
    ``(R, T + 1)`` array of changes, position ``j`` of a row is set where the mask differs between tokens
    ``j - 1`` and ``j`` (token ``-1`` and ``T`` counting as 0), so a row's set positions alternate run
    start, run end; ``flatnonzero`` finds them.
    """
    mask = np.asarray(mask)
    if mask.ndim != 2:
        raise ValueError(f"the mask of model tokens must be 2-D (batch, response_length), got shape {mask.shape}")
    rows, length = mask.shape
    width = length + 1
    block = max(1, min(rows, _BLOCK_ENTRIES // width))
    change = np.empty((block, width), dtype=bool)
    model = None if mask.dtype == bool else np.empty((block, length), dtype=bool)
    found = [np.zeros(0, dtype=np.intp)]
    for first in range(0, rows if length else 0, block):
        part = mask[first : first + block]
        size = part.shape[0]
        nonzero = part if model is None else np.not_equal(part, 0, out=model[:size])
        changed = change[:size]
        changed[:, 0] = nonzero[:, 0]
        changed[:, -1] = nonzero[:, -1]
        np.not_equal(nonzero[:, 1:], nonzero[:, :-1], out=changed[:, 1:-1])
        found.append(np.flatnonzero(changed) + first * width)
    row, col = np.divmod(np.concatenate(found), width)
    row_offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(row[0::2], minlength=rows), out=row_offsets[1:])
    return Turns(row[0::2].astype(np.int64), col[0::2].astype(np.int64), col[1::2].astype(np.int64), row_offsets, length)


def _first_turns(turns: Turns) -> np.ndarray:
    """``(K,)`` bool: whether each turn is the first of its row."""
    first = np.zeros(turns.num_turns, dtype=bool)
    first[turns.row_offsets[:-1][turns.per_row > 0]] = True
    return first


def _segment_starts(turns: Turns) -> np.ndarray:
    """``(K,)`` flat (row-major) index where each turn's reward segment starts: its first token, 0 for a row's first turn."""
    return turns.row * turns.length + np.where(_first_turns(turns), 0, turns.start)


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
    """``(K,)`` anchor state of each turn: :data:`PROMPT_ANCHOR` for a row's first turn, else the ids ``(B, T)`` right before it (:class:`TokenIds`).

    Equal states are one object (:func:`turn_anchor_codes`): no Python work per turn beyond its list entry.
    """
    return coded_states(*turn_anchor_codes(tokens, turns))


def coded_states(codes: np.ndarray, distinct: Sequence[Hashable]) -> list[Hashable]:
    """``[distinct[c] for c in codes]`` ``(K,)``, gathered in numpy: entries of equal code are one object."""
    table = np.empty(len(distinct), dtype=object)
    for k, state in enumerate(distinct):  # one by one: a tuple state stays one entry
        table[k] = state
    return table[codes].tolist()


def turn_anchor_codes(tokens: np.ndarray, turns: Turns) -> tuple[np.ndarray, list[Hashable]]:
    """The anchor states of :func:`turn_anchor_states` coded: ``(K,)`` int64 codes and the distinct states, turn ``j``'s
    state being ``distinct[codes[j]]``; codes are dense from 0 in order of first appearance, equal exactly for equal states.

    The environment segments are coded in numpy, those of one length at a time (:func:`_code_rows`); one
    :class:`TokenIds` is made per distinct segment.
    """
    tokens = np.asarray(tokens)
    shape = (turns.row_offsets.size - 1, turns.length)
    if tokens.shape != shape:
        raise ValueError(f"the token ids have shape {tokens.shape}, the mask the turns were found in {shape}; anchor states are read at the mask's positions")
    count = turns.num_turns
    raw = np.zeros(count, dtype=np.int64)  # code 0: PROMPT_ANCHOR, first seen at turn 0 (the first turn of its row)
    distinct: list[Hashable] = [PROMPT_ANCHOR] if count else []
    seen_at = [np.zeros(len(distinct), dtype=np.int64)]  # the first turn of each distinct state
    later = np.flatnonzero(~_first_turns(turns))
    begin = turns.end[later - 1]  # the segment before turn j: from the end of turn j - 1 of its row to its start
    lengths = turns.start[later] - begin
    by_length = np.argsort(lengths, kind="stable")
    cuts = np.flatnonzero(np.diff(lengths[by_length])) + 1
    for part in np.split(by_length, cuts) if later.size else ():
        length, at = int(lengths[part[0]]), later[part]
        spans = np.ascontiguousarray(sliding_window_view(tokens, length, axis=1)[turns.row[at], begin[part]], dtype=np.int64)
        span_codes, first = _code_rows(spans)
        raw[at] = len(distinct) + span_codes
        seen_at.append(at[first])
        ids, width = memoryview(spans).cast("B"), length * spans.itemsize
        distinct.extend(TokenIds(ids[k * width : (k + 1) * width]) for k in first.tolist())
    order = np.argsort(np.concatenate(seen_at))
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[raw], [distinct[k] for k in order.tolist()]


def _code_rows(spans: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(n,)`` codes of the rows of ``spans`` ``(n, L)`` int64, dense from 0, equal for equal rows only; ``(d,)`` the first row of each code.

    Rows are hashed (a dot product with random odd multipliers, modulo 2**64), grouped by hash, and each row whose
    hash is not its own compared with its group's first: exact. Should two different rows share a hash, they are coded by their bytes.
    """
    hashed = np.einsum("ij,j->i", spans.view(np.uint64), _multipliers(spans.shape[1]))  # wraps modulo 2**64
    _, first, codes, sizes = np.unique(hashed, return_index=True, return_inverse=True, return_counts=True)
    codes = codes.reshape(-1)
    shared = np.flatnonzero(sizes[codes] > 1)  # rows whose hash another row has: compared with the first row of that hash
    if np.array_equal(spans[shared], spans[first[codes[shared]]]):
        return codes, first
    seen: dict[bytes, int] = {}
    codes = np.fromiter((seen.setdefault(row.tobytes(), len(seen)) for row in spans), dtype=np.int64, count=spans.shape[0])
    return codes, np.unique(codes, return_index=True)[1]


def _multipliers(length: int) -> np.ndarray:
    """``(length,)`` uint64 odd multipliers, the same on every call (a fixed seed)."""
    return np.random.default_rng(_HASH_SEED).integers(0, 2**63, size=length, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


def spread_to_tokens(per_turn: np.ndarray, turns: Turns, dtype: np.dtype | type = np.float32) -> np.ndarray:
    """``(B, T)`` array where every model token of turn ``j`` holds ``per_turn[j]`` ``(K,)`` and every other token 0.

    Each row is a run-length code: a gap of zeros before each turn, the turn's value over its tokens, the
    zeros after the last turn; one ``np.repeat`` writes it, so the output is the only ``(B, T)`` allocation.
    """
    rows, count = turns.row_offsets.size - 1, turns.num_turns
    per_turn = np.asarray(per_turn)
    if per_turn.shape != (count,):
        raise ValueError(f"spread_to_tokens: one value per turn is needed, got shape {per_turn.shape} for {count} turns")
    values = np.zeros(2 * count + rows, dtype=dtype)  # per row: gap, turn, gap, turn, ..., trailing gap
    runs = np.empty(2 * count + rows, dtype=np.int64)
    gap = 2 * np.arange(count) + turns.row  # the gap before turn j
    values[gap + 1] = per_turn
    runs[gap + 1] = turns.end - turns.start
    previous_end = np.empty(count, dtype=np.int64)
    previous_end[1:] = turns.end[:-1]
    has = turns.per_row > 0
    previous_end[turns.row_offsets[:-1][has]] = 0
    runs[gap] = turns.start - previous_end
    last_end = np.zeros(rows, dtype=np.int64)
    last_end[has] = turns.end[turns.row_offsets[1:][has] - 1]
    runs[2 * turns.row_offsets[1:] + np.arange(rows)] = turns.length - last_end
    return np.repeat(values, runs).reshape(rows, turns.length)
