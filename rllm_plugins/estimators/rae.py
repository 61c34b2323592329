"""RAE, role-conditioned advantage estimation (SPIRAL, Liu et al. 2025, https://arxiv.org/abs/2506.24119).

A running baseline per key instead of a group baseline: each trajectory, in scan order, is scored
against its key's baseline *before* its own reward updates it,

    A = r - b,    then    b <- decay * b + (1 - decay) * r,

with baselines starting at 0 (prime-rl's ``RAEAlgorithm``, decay 0.95 by default, ``0 <= decay < 1``).
The scan order is the order of the trajectories in the call (groups in order, trajectories within
a group in order). The key is the role (the state is already kept per role: one baseline per role,
``key_by="role"``) or the task (``key_by="task"``: one baseline per task id within the role, from the
``task_ids`` the caller passes). Group sizes do not matter, so groups of one work.

State: ``{"baseline": b}`` (``key_by="role"``) or ``{"task_baselines": {task_id: b}}`` (``"task"``).

Vectorised: within one key the scan has the closed form
``b_before[q] = d^q b_0 + (1 - d) sum_{j<q} d^(q-1-j) r_j``, computed for all keys at once as a
cumulative sum of ``r_j d^(-j)`` over chunks short enough that ``d^(-j)`` stays finite.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

KEY_BY = ("role", "task")
_SCALE_LIMIT = 200.0 * math.log(10.0)  # d^(-q) stays below 1e200 within a chunk
_MAX_CHUNK = 1024  # trajectories of one key per chunk (the padding of a grid is at most one chunk per key)


def check_rae_options(options: Mapping[str, Any]) -> None:
    """``decay`` in [0, 1) and ``key_by`` one of ``"role"``, ``"task"``."""
    decay = options.get("decay", 0.95)
    if isinstance(decay, (bool, np.bool_)) or not isinstance(decay, (int, float, np.integer, np.floating)) or not 0.0 <= float(decay) < 1.0:
        raise ValueError(f"rae: option 'decay' must be a number with 0 <= decay < 1 (prime-rl's range; 0.95 by default), got {decay!r}")
    key_by = options.get("key_by", "role")
    if key_by not in KEY_BY:
        raise ValueError(f"rae: option 'key_by' must be one of {list(KEY_BY)}, got {key_by!r}")


def ema_scan(values: np.ndarray, codes: np.ndarray, initial: np.ndarray, decay: float) -> tuple[np.ndarray, np.ndarray]:
    """Per key, the baseline each row is scored against and each key's last baseline.

    ``values`` float64 ``(N,)`` rewards in scan order, ``codes`` int64 ``(N,)`` key of each row in
    ``[0, K)``, ``initial`` float64 ``(K,)`` baselines before the scan. Returns ``before`` ``(N,)``
    (the baseline row i reads) and ``final`` ``(K,)`` (after every row updated its key's).

    Keys are processed in classes of similar length (within 2x), each as a ``(keys, chunks, C)`` grid:
    a cumulative sum along the chunk, then the carry from chunk to chunk (a loop over chunks, at most N / C).
    """
    n, k = values.size, initial.size
    before = np.empty(n, dtype=np.float64)
    final = np.array(initial, dtype=np.float64)
    if n == 0:
        return before, final
    grouped = bool(np.all(codes[1:] >= codes[:-1]))  # rows of a key already contiguous (one key, say): no sort
    order = None if grouped else np.argsort(codes, kind="stable")
    counts = np.bincount(codes, minlength=k)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    r = values if order is None else values[order]
    out = before if order is None else np.empty(n)
    present = np.flatnonzero(counts)
    last = starts[present] + counts[present] - 1
    if decay == 0.0:  # b = the key's previous reward
        out[1:] = r[:-1]
        out[starts[present]] = initial[present]
    else:
        _scan_by_length_class(r, counts, starts, present, final, decay, out)
    if order is not None:
        before[order] = out
    final[present] = decay * out[last] + (1.0 - decay) * r[last]
    return before, final


def _scan_by_length_class(
    r: np.ndarray, counts: np.ndarray, starts: np.ndarray, present: np.ndarray, initial: np.ndarray, decay: float, out: np.ndarray
) -> None:
    """``out[rows of key]`` = the baselines read, for rows grouped by key (``r`` in that order); ``initial`` per key, read only."""
    chunk = max(1, min(_MAX_CHUNK, int(_SCALE_LIMIT / -math.log(decay))))
    grow = decay ** -np.arange(chunk, dtype=np.float64)  # d^-q, at most 1e200
    shrink = decay ** np.arange(chunk + 1, dtype=np.float64)  # d^q
    length_class = np.ceil(np.log2(counts[present])).astype(np.int64)
    for value in np.unique(length_class):
        keys = present[length_class == value]
        sizes = counts[keys]
        chunks = int(sizes.max() - 1) // chunk + 1
        width = chunk if chunks > 1 else int(sizes.max())
        if keys.size == 1:  # one key (the role): its rows are one slice, the grid a reshape of them
            start, size = int(starts[keys[0]]), int(sizes[0])
            out[start : start + size] = _scan_one_key(r[start : start + size], float(initial[keys[0]]), decay, chunks, width, grow, shrink)
            continue
        key_of_row = np.repeat(np.arange(keys.size), sizes)
        position = np.arange(key_of_row.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        rows = np.repeat(starts[keys], sizes) + position
        q = position % chunk
        cell = key_of_row * (chunks * width) + position  # flat index into the (keys, chunks, width) grid
        grid = np.zeros((keys.size, chunks, width))
        grid.reshape(-1)[cell] = r[rows] * grow[q]
        inclusive = np.cumsum(grid, axis=2)  # sum_{j<=q} r_j d^-j within each chunk
        carry = np.empty((keys.size, chunks))
        b = initial[keys]
        for i in range(chunks):  # chunks before a key's last are full
            carry[:, i] = b
            b = shrink[width] * b + (1.0 - decay) * shrink[width - 1] * inclusive[:, i, -1]
        previous = np.maximum(q - 1, 0)
        exclusive = np.where(q > 0, inclusive.reshape(-1)[cell - (q > 0)], 0.0)
        out[rows] = shrink[q] * carry.reshape(-1)[key_of_row * chunks + position // chunk] + (1.0 - decay) * shrink[previous] * exclusive


def _scan_one_key(r: np.ndarray, b0: float, decay: float, chunks: int, width: int, grow: np.ndarray, shrink: np.ndarray) -> np.ndarray:
    """The baselines read by the rows ``r`` (N,) of one key starting from ``b0``: the grid is ``r`` padded and reshaped."""
    grid = np.zeros(chunks * width)
    grid[: r.size] = r
    grid = grid.reshape(chunks, width)
    grid *= grow[:width]
    np.cumsum(grid, axis=1, out=grid)  # sum_{j<=q} r_j d^-j within each chunk
    carry = np.empty(chunks)
    b = b0
    for i in range(chunks):
        carry[i] = b
        b = shrink[width] * b + (1.0 - decay) * shrink[width - 1] * grid[i, -1]
    out = np.empty((chunks, width))
    out[:, 1:] = grid[:, :-1]  # exclusive sums
    out[:, 1:] *= (1.0 - decay) * shrink[: width - 1]
    out[:, 0] = 0.0
    out += shrink[:width] * carry[:, None]
    return out.reshape(-1)[: r.size]


def rae(
    values: np.ndarray,
    offsets: np.ndarray,
    /,
    *,
    state: Mapping[str, Any],
    decay: float = 0.95,
    key_by: str = "role",
    task_ids: np.ndarray | None = None,
    **_: Any,
) -> tuple[np.ndarray, dict[str, Any]]:
    """RAE (SPIRAL): r minus a running baseline per role (or per task) read before r updates it; state across calls."""
    check_rae_options({"decay": decay, "key_by": key_by})
    decay = float(decay)
    values = np.asarray(values, dtype=np.float64)
    if key_by == "role":
        b0 = float(state.get("baseline", 0.0))
        before, final = ema_scan(values, np.zeros(values.size, dtype=np.int64), np.array([b0]), decay)
        return values - before, {"baseline": float(final[0])}
    if task_ids is None or len(task_ids) != values.size:
        got = "none" if task_ids is None else f"{len(task_ids)} for {values.size} trajectories"
        raise ValueError(
            f"rae: key_by='task' needs a stable task id per trajectory (task_ids), got {got}; the core takes it from "
            "TrajectoryGroup.group_id ('<task>:<role>'), TRL from the prompt. verl's estimator path has none (uid is new every step): use key_by='role'"
        )
    code_of: dict[Any, int] = {}
    try:  # one dict lookup per trajectory: the only per-row Python work
        codes = np.array([code_of.setdefault(t, len(code_of)) for t in task_ids], dtype=np.int64)
    except TypeError:
        i = next(i for i, t in enumerate(task_ids) if not isinstance(t, str))
        raise ValueError(
            f"rae: key_by='task': trajectory {i} has task id {task_ids[i]!r} ({type(task_ids[i]).__name__}); task ids must be non-empty str"
        ) from None
    names = list(code_of)
    bad = next((t for t in names if not isinstance(t, str) or not t), None)
    if bad is not None:
        i = next(i for i, t in enumerate(task_ids) if t is bad or t == bad)
        if isinstance(bad, str):
            raise ValueError(f"rae: key_by='task': trajectory {i} has an empty task id; give every group a group_id '<task>:<role>'")
        raise ValueError(f"rae: key_by='task': trajectory {i} has task id {bad!r} ({type(bad).__name__}); task ids must be non-empty str")
    known: dict[str, float] = dict(state.get("task_baselines", {}))
    initial = np.array([float(known.get(name, 0.0)) for name in names])
    before, final = ema_scan(values, codes, initial, decay)
    known.update(zip(map(str, names), final.tolist(), strict=True))
    return values - before, {"task_baselines": known}
