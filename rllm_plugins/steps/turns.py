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
from functools import cached_property

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .anchors import TokenIds

__all__ = ["PROMPT_ANCHOR", "Turns", "coded_states", "find_turns", "spread_to_tokens", "turn_anchor_codes", "turn_anchor_states", "turn_rewards"]

PROMPT_ANCHOR = "<prompt>"  # the anchor state of every row's first turn
_BLOCK_ENTRIES = 1 << 18  # mask entries per block in find_turns: its bool block (256 KiB) stays in a core's L2 cache (measured: 5% faster than 128 KiB)
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

    @cached_property
    def per_row(self) -> np.ndarray:
        """``(B,)`` number of turns of each row (computed once, read-only)."""
        counts = np.diff(self.row_offsets)
        counts.flags.writeable = False
        return counts


def find_turns(mask: np.ndarray) -> Turns:
    """The maximal runs of non-zero entries of each row of ``mask`` ``(B, T)``.

    One read of the mask, in blocks that stay in cache (no ``(B, T)`` temporary). Read flat, the entries that differ
    from the one before are the candidate boundaries, compared as they are (no pass converting them to bool; a mask that
    is not contiguous is converted a block at a time). Between two candidates the entries are equal, so a candidate is
    a run boundary exactly where the non-zero-ness of the entry after it differs from that after the candidate before
    (with a mask of 0 and 1, every candidate is; with other values, ``2`` after ``1`` or ``NaN`` after ``NaN`` is not).
    A candidate before a row's first entry is that row's start if the entry is non-zero, else the end (at column ``T``)
    of the row before; the boundaries no candidate marks, a start at column 0 and an end at column ``T`` where a row's
    first or last entry is non-zero, are read from the mask's first and last columns. A row's boundaries alternate run
    start, run end.
    """
    mask = np.asarray(mask)
    if mask.ndim != 2:
        raise ValueError(f"the mask of model tokens must be 2-D (batch, response_length), got shape {mask.shape}")
    rows, length = mask.shape
    if rows == 0 or length == 0:
        none = np.zeros(0, dtype=np.int64)
        return Turns(none, none, none, np.zeros(rows + 1, dtype=np.int64), length)
    candidates, after = _changes(mask)  # after: None when every candidate is a boundary
    first, last = mask[:, 0], mask[:, -1]
    starts_row, ends_row = first != 0, last != 0
    row, column = np.divmod(candidates, length)
    keys = candidates + row  # row * (T + 1) + column: a run end at column T
    at_row_start = np.flatnonzero(column == 0)
    keys[at_row_start] -= ~starts_row[row[at_row_start]]  # the end of the row before, at its column T
    keys <<= 1  # times 2, plus whether the entry after is non-zero
    if after is not None:
        keys += after
    # boundaries no candidate marks: row 0's start, the last row's end, and where a row ends and the next starts non-zero
    both = ends_row[:-1] & starts_row[1:]
    unmarked_end = np.flatnonzero(both)
    unmarked_start = np.flatnonzero(both if after is None else both & (last[:-1] == first[1:])) + 1
    extra = [2 * (unmarked_end + 1) * (length + 1) - 2, 2 * unmarked_start * (length + 1) + 1]
    if starts_row[0]:
        extra.append(np.ones(1, dtype=np.int64))
    if ends_row[-1]:
        extra.append(np.full(1, 2 * rows * (length + 1) - 2, dtype=np.int64))
    extra = np.concatenate(extra)
    if extra.size:
        extra.sort()
        keys = np.insert(keys, np.searchsorted(keys, extra), extra)
    if after is not None and keys.size:
        nonzero = (keys & 1).astype(bool)
        flips = nonzero[1:] != nonzero[:-1]
        if not (nonzero[0] and flips.all()):  # not a mask of 0 and 1: the candidates where non-zero-ness flips
            keys = keys[np.concatenate((nonzero[:1], flips))]
    starts = keys[0::2] >> 1
    row, start = np.divmod(starts, length + 1)
    row_offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=rows), out=row_offsets[1:])
    return Turns(row, start, (keys[1::2] >> 1) - (starts - start), row_offsets, length)


def _changes(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """``(C,)`` flat index ``q >= 1`` of each entry of ``mask`` ``(B, T)`` that differs from the entry before, and whether
    each is non-zero (None: a bool mask, every change is of non-zero-ness), in blocks of :data:`_BLOCK_ENTRIES` entries."""
    rows, length = mask.shape
    size = rows * length
    found, after = [np.zeros(0, dtype=np.int64)], []
    if mask.flags.c_contiguous:
        change = np.empty(min(size, _BLOCK_ENTRIES), dtype=bool)
        flat = mask.reshape(-1)
        for begin in range(1, size, _BLOCK_ENTRIES):
            stop = min(size, begin + _BLOCK_ENTRIES)
            at = np.flatnonzero(np.not_equal(flat[begin:stop], flat[begin - 1 : stop - 1], out=change[: stop - begin]))
            at += begin
            if mask.dtype != bool:
                after.append(flat[at] != 0)  # still in cache
            found.append(at)
        return np.concatenate(found), None if mask.dtype == bool else np.concatenate([np.zeros(0, dtype=bool), *after])
    block = max(1, _BLOCK_ENTRIES // length)  # rows, converted to bool with the last entry of the block before
    model, change = np.zeros(block * length + 1, dtype=bool), np.empty(block * length, dtype=bool)
    for first in range(0, rows, block):
        part = mask[first : first + block]
        count = part.size
        np.not_equal(part, 0, out=model[1 : count + 1].reshape(part.shape))
        at = np.flatnonzero(np.not_equal(model[1 : count + 1], model[:count], out=change[:count]))
        at += first * length
        found.append(at[at > 0])
        model[0] = model[count]
    return np.concatenate(found), None


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

    The environment segments are read from ``tokens`` those of one length at a time, each as one fixed-size item (no
    index per token), hashed (:func:`_hash_rows`) and grouped by hash over all lengths at once (:func:`_first_of_equal`,
    no sort); every segment is then compared with the first one of its group, so codes stay exact (should two different
    segments share a hash, they are coded by their bytes). One :class:`TokenIds` is made per distinct segment.
    """
    tokens = np.asarray(tokens)
    shape = (turns.row_offsets.size - 1, turns.length)
    if tokens.shape != shape:
        raise ValueError(f"the token ids have shape {tokens.shape}, the mask the turns were found in {shape}; anchor states are read at the mask's positions")
    count = turns.num_turns
    if count == 0:
        return np.zeros(0, dtype=np.int64), []
    later = np.flatnonzero(~_first_turns(turns))  # code 0: PROMPT_ANCHOR, first seen at turn 0 (the first turn of its row)
    codes = np.zeros(count, dtype=np.int64)
    if later.size == 0:
        return codes, [PROMPT_ANCHOR]
    begin = turns.end[later - 1]  # the segment before turn j: from the end of turn j - 1 of its row to its start
    lengths = turns.start[later] - begin
    by_length = np.argsort(lengths.astype(np.int16) if lengths.max() < 2**15 else lengths, kind="stable")  # 16 bits: a radix sort
    bounds = np.flatnonzero(np.diff(lengths[by_length], prepend=-1, append=-1))
    parts = [by_length[lo:hi] for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)]
    keys = np.empty(later.size, dtype=np.uint64)
    spans = []  # per part: its segments (n, length)
    for part in parts:
        spans.append(_segments(tokens, turns.row[later[part]], begin[part], int(lengths[part[0]])))
        keys[part] = _hash_rows(spans[-1])
    first = _first_of_equal(keys)
    place = np.empty(later.size, dtype=np.int64)  # each segment's place in its part
    place[by_length] = np.arange(later.size) - np.repeat(bounds[:-1], np.diff(bounds))
    if not (bool((lengths[first] == lengths).all()) and _equal_to_their_first(spans, parts, first, place)):
        seen: dict[bytes, int] = {}  # two different segments share a hash: coded by their bytes
        raw = np.empty(later.size, dtype=np.int64)
        for part, span in zip(parts, spans, strict=True):
            raw[part] = np.fromiter((seen.setdefault(ids.tobytes(), len(seen)) for ids in span), dtype=np.int64, count=part.size)
        first = _first_of_equal(raw.view(np.uint64))
    is_first = first == np.arange(later.size)
    rank = np.cumsum(is_first) - 1
    codes[later] = rank[first] + 1
    distinct: list[Hashable] = [PROMPT_ANCHOR] + [None] * int(rank[-1] + 1)
    for k, part in enumerate(parts):
        span, spans[k] = spans[k], None  # released once its states are made
        new = np.flatnonzero(is_first[part])
        bytes_view, width = memoryview(span).cast("B"), span.shape[1] * 8
        for at, code in zip(new.tolist(), rank[part[new]].tolist(), strict=True):
            distinct[code + 1] = TokenIds(bytes_view[at * width : (at + 1) * width] if span.itemsize == 8 else span[at].astype(np.int64).tobytes())
    return codes, distinct


def _equal_to_their_first(spans: list[np.ndarray], parts: list[np.ndarray], first: np.ndarray, place: np.ndarray) -> bool:
    """Whether every segment equals the first one of its group (``first``: flat over the parts, of equal length; ``place``:
    each segment's row in its part's ``spans``), compared in blocks of :data:`_BLOCK_ENTRIES` ids (no copy of all segments)."""
    for part, span in zip(parts, spans, strict=True):
        others = np.flatnonzero(first[part] != part)  # the members that are not the first of their group
        step = max(1, _BLOCK_ENTRIES // span.shape[1])
        for lo in range(0, others.size, step):
            at = others[lo : lo + step]
            if not np.array_equal(span.take(at, axis=0), span.take(place[first[part[at]]], axis=0)):
                return False
    return True


def _segments(tokens: np.ndarray, rows: np.ndarray, begins: np.ndarray, length: int) -> np.ndarray:
    """``tokens[rows[i], begins[i] : begins[i] + length]`` ``(n, length)``, in :func:`_ids_dtype`: each segment read as one
    item of its bytes (no index per token) where the tokens allow it, else copied."""
    dtype = _ids_dtype(tokens.dtype)
    item = np.dtype((np.void, length * dtype.itemsize))
    if dtype != tokens.dtype or tokens.strides[1] != tokens.itemsize:  # converted, or not contiguous along a row
        return np.ascontiguousarray(sliding_window_view(tokens, length, axis=1)[rows, begins], dtype=dtype)
    if tokens.flags.c_contiguous:  # one flat index per segment: the item at each entry of the flat tokens
        windows = np.ndarray((tokens.size - length + 1,), dtype=item, buffer=tokens, strides=(tokens.itemsize,))
        spans = windows[rows * tokens.shape[1] + begins]
    else:
        spans = sliding_window_view(tokens, length, axis=1).view(item)[..., 0][rows, begins]
    return spans.view(dtype).reshape(rows.size, length)


def _ids_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype segments are read in: the tokens' own for integers (equal bytes, equal ids), int64 for others (as :class:`TokenIds` reads them)."""
    return dtype if dtype.kind in "iub" else np.dtype(np.int64)


def _hash_rows(ids: np.ndarray) -> np.ndarray:
    """``(n,)`` uint64 hash of each row of ``ids`` ``(n, L)`` (integers): the row as uint64 dotted with odd multipliers, modulo 2**64, plus ``L``."""
    length = ids.shape[1]
    hashed = np.einsum("ij,j->i", ids.view(np.uint64) if ids.itemsize == 8 else ids.astype(np.uint64), _multipliers(length))  # wraps modulo 2**64
    hashed += np.uint64(length)
    return hashed


def _first_of_equal(keys: np.ndarray) -> np.ndarray:
    """``(n,)`` int64: for each entry of ``keys`` ``(n,)`` uint64, the index of the first entry equal to it.

    A hash table in numpy, no sort: each round writes the entries still open into a table of at least ``2n`` slots
    (a slot from the key's top bits after an odd multiplier of that round), and an entry whose slot holds an equal key
    has found its group (equal keys share a slot, so a group is found at once). The first of each group: a minimum.
    """
    count = keys.size
    found = np.empty(count, dtype=np.int64)
    bits = max(4, (2 * count).bit_length())
    table = np.empty(1 << bits, dtype=np.int64)
    todo = np.arange(count)
    for salt in _SALTS:
        if todo.size == 0:
            break
        open_keys = keys[todo]
        slots = ((open_keys * np.uint64(salt)) >> np.uint64(64 - bits)).astype(np.intp)
        table[slots] = todo
        member = table[slots]
        same = keys[member] == open_keys
        found[todo[same]] = member[same]
        todo = todo[~same]
    if todo.size:  # keys the multipliers keep on colliding (none in practice): sorted
        _, inverse = np.unique(keys[todo], return_inverse=True)
        found[todo] = todo[np.unique(inverse, return_index=True)[1]][inverse.reshape(-1)]
    lowest = np.full(count, count, dtype=np.int64)
    np.minimum.at(lowest, found, np.arange(count))
    return lowest[found]


_SALTS = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93, 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53)
_MULTIPLIERS = np.zeros(0, dtype=np.uint64)


def _multipliers(length: int) -> np.ndarray:
    """``(length,)`` uint64 odd multipliers, the same on every call (a fixed seed; drawn once, for the longest length asked)."""
    global _MULTIPLIERS
    if _MULTIPLIERS.size < length:
        drawn = np.random.default_rng(_HASH_SEED).integers(0, 2**63, size=max(length, 2 * _MULTIPLIERS.size, 64), dtype=np.uint64)
        _MULTIPLIERS = drawn * np.uint64(2) + np.uint64(1)
    return _MULTIPLIERS[:length]


def spread_to_tokens(per_turn: np.ndarray, turns: Turns, dtype: np.dtype | type = np.float32) -> np.ndarray:
    """``(B, T)`` array where every model token of turn ``j`` holds ``per_turn[j]`` ``(K,)`` and every other token 0.

    The output, flat, is a run-length code: a gap of zeros before each turn (a row's tokens after its last turn and the
    next rows' before their first are one gap), the turn's value over its tokens, the zeros after the last turn; one
    ``np.repeat`` writes it, so the output is the only ``(B, T)`` allocation.
    """
    rows, count = turns.row_offsets.size - 1, turns.num_turns
    per_turn = np.asarray(per_turn)
    if per_turn.shape != (count,):
        raise ValueError(f"spread_to_tokens: one value per turn is needed, got shape {per_turn.shape} for {count} turns")
    values = np.zeros(2 * count + 1, dtype=dtype)  # gap, turn, gap, turn, ..., the gap after the last turn
    values[1::2] = per_turn
    runs = np.empty(2 * count + 1, dtype=np.int64)
    starts = turns.row * turns.length + turns.start  # flat
    ends = starts + (turns.end - turns.start)
    runs[1::2] = ends - starts
    runs[2:-1:2] = starts[1:] - ends[:-1]
    runs[0] = starts[0] if count else rows * turns.length
    runs[-1] = rows * turns.length - (ends[-1] if count else 0)
    return np.repeat(values, runs).reshape(rows, turns.length)
