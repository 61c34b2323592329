"""RAE, role-conditioned advantage estimation (SPIRAL, Liu et al. 2025, https://arxiv.org/abs/2506.24119).

A running baseline per key instead of a group baseline: each trajectory, in scan order, is scored
against its key's baseline *before* its own reward updates it,

    A = r - b,    then    b <- decay * b + (1 - decay) * r,

with baselines starting at 0 (prime-rl's ``RAEAlgorithm``, decay 0.95 by default, ``0 <= decay < 1``).
The scan order is the order of the trajectories in the call (groups in order, trajectories within
a group in order). The key is the role (the state is already kept per role: one baseline per role,
``key_by="role"``) or the task (``key_by="task"``: one baseline per task id within the role, from the
``task_ids`` the caller passes). Group sizes do not matter, so groups of one work.

State: ``{"baseline": b}`` (``key_by="role"``) or ``{"task_baselines": {task_id: b}}`` (``"task"``)
(:data:`STATE_SCHEMA`); a state of the other layout is refused, never ignored. A call reads and
returns only its batch's tasks (:func:`~rllm_plugins.state.views.updated`), so its cost does not grow
with the tasks the state holds.

Vectorised: within one key the scan has the closed form
``b_before[q] = d^q b_0 + (1 - d) sum_{j<q} d^(q-1-j) r_j``. One key (the role): a cumulative sum of
``r_j d^(-j)`` over chunks short enough that ``d^(-j)`` stays finite. Several keys (tasks): the rows
sorted by key, then a segmented scan by doubling over all keys at once. Below
:data:`SCAN_IN_PYTHON_BELOW` trajectories (``key_by="task"``) a row-by-row scan costs less.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from itertools import count, repeat
from typing import Any

import numpy as np

from ..spec import AdvEstimatorSpec
from ..state.schema import MapOf
from ..state.views import StateView, updated

KEY_BY = ("role", "task")
_SCALE_LIMIT = 200.0 * math.log(10.0)  # d^(-q) stays below 1e200 within a chunk
_MAX_CHUNK = 1024  # trajectories of one key per chunk
STATE_SCHEMA = {"baseline": float, "task_baselines": MapOf(float)}
_LAYOUT = {"role": "baseline", "task": "task_baselines"}
SCAN_IN_PYTHON_BELOW = 2048  # key_by="task": below this many trajectories a row-by-row scan costs less than numpy's calls


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

    One key: a closed form in chunks (:func:`_scan_one_key`); several: rows sorted by key (stable), then a
    segmented scan by doubling (:func:`_scan_by_key`).
    """
    n, k = values.size, initial.size
    before = np.empty(n, dtype=np.float64)
    final = np.array(initial, dtype=np.float64)
    if n == 0:
        return before, final
    if k == 1:  # one key (the role): its rows are the whole scan, no grouping
        if decay == 0.0:  # b = the previous reward
            before[1:] = values[:-1]
            before[0] = final[0]
        else:
            before[:] = _scan_one_key(values, float(final[0]), decay)
        final[0] = decay * before[-1] + (1.0 - decay) * values[-1]
        return before, final
    grouped = bool(np.all(codes[1:] >= codes[:-1]))  # rows of a key already contiguous (one key, say): no sort
    order = None if grouped else np.argsort(codes.astype(np.uint16) if k <= 1 << 16 else codes, kind="stable")  # 16-bit keys: a radix sort
    counts = np.bincount(codes, minlength=k)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    r = values if order is None else values[order]
    out = before if order is None else np.empty(n)
    present = np.flatnonzero(counts)
    last = starts[present] + counts[present] - 1
    if decay == 0.0:  # b = the key's previous reward
        out[1:] = r[:-1]
        out[starts[present]] = initial[present]
    elif present.size == 1:  # one key (the role): its rows are one slice
        out[:] = _scan_one_key(r, float(initial[present[0]]), decay)
    else:
        _scan_by_key(r, counts, starts, present, final, decay, out)
    if order is not None:
        before[order] = out
    final[present] = decay * out[last] + (1.0 - decay) * r[last]
    return before, final


def _scan_by_key(r: np.ndarray, counts: np.ndarray, starts: np.ndarray, present: np.ndarray, initial: np.ndarray, decay: float, out: np.ndarray) -> None:
    """``out[rows of key]`` = the baselines read, for rows grouped by key (``r`` in that order); ``initial`` per key, read only.

    Within a key (row ``p`` at position ``q``), ``before[p] = d^q b_0 + c[p - 1]`` with ``c[p] = d c[p - 1] + (1 - d) r_p``
    (0 before the key's first row): a segmented scan by doubling, ``ceil(log2(longest key))`` passes over the rows,
    every factor at most 1 (nothing overflows).
    """
    sizes = counts[present]
    q = np.arange(r.size)
    q -= np.repeat(starts[present], sizes)  # position within its key
    c = (1.0 - decay) * r
    spare = np.empty(r.size)  # one scratch row for every pass: no (N,) temporary per pass
    step, factor, longest = 1, decay, int(sizes.max())
    while step < longest:
        shifted = np.multiply(c[:-step], factor, out=spare[: r.size - step])  # computed whole before the add
        shifted[q[step:] < step] = 0.0  # no row of the same key `step` rows before
        c[step:] += shifted
        step, factor = 2 * step, factor * factor
    np.multiply(np.take(decay ** np.arange(longest, dtype=np.float64), q, out=spare), np.repeat(initial[present], sizes), out=out)  # d^q b_0
    carried = spare[: r.size - 1]
    np.copyto(carried, c[:-1])
    carried[q[1:] == 0] = 0.0  # a key's first row: nothing carried
    out[1:] += carried


@functools.lru_cache(maxsize=8)
def _powers(decay: float, width: int) -> tuple[np.ndarray, np.ndarray]:
    """``d^-q`` ``(width,)`` (at most 1e200) and ``d^q`` ``(width + 1,)``, read-only: made once per decay and chunk width (each ``pow`` costs)."""
    grow = decay ** -np.arange(width, dtype=np.float64)
    shrink = decay ** np.arange(width + 1, dtype=np.float64)
    grow.flags.writeable = shrink.flags.writeable = False
    return grow, shrink


def _scan_one_key(r: np.ndarray, b0: float, decay: float) -> np.ndarray:
    """The baselines read by the rows ``r`` (N,) of one key starting from ``b0``: the grid is ``r`` padded and reshaped.

    Chunks of ``C`` rows (``d^-C`` stays below 1e200): a cumulative sum of ``r_j d^-j`` along each, then the
    carry from chunk to chunk (a loop over chunks, at most N / C).
    """
    chunk = max(1, min(_MAX_CHUNK, int(_SCALE_LIMIT / -math.log(decay))))
    chunks = (r.size - 1) // chunk + 1
    width = chunk if chunks > 1 else r.size
    grow, shrink = _powers(decay, width)
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
    other = next((key for key in _LAYOUT.values() if key != _LAYOUT[key_by] and key in state), None)
    if other is not None:
        raise ValueError(
            f"rae: key_by={key_by!r} keeps {_LAYOUT[key_by]!r}, but the state holds {other!r} (made with key_by="
            f"{next(k for k, v in _LAYOUT.items() if v == other)!r}); set key_by back, or start from a fresh state"
        )
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
    ids = task_ids.tolist() if isinstance(task_ids, np.ndarray) else list(task_ids)
    try:
        if values.size < SCAN_IN_PYTHON_BELOW:
            first_rows = None
            baselines = dict.fromkeys(ids, 0.0)  # the batch's tasks, in order of first appearance
        else:
            first_rows = _first_rows(ids)
            baselines = dict.fromkeys(first_rows[0], 0.0)
        "".join(baselines)  # every id a str (a C-level check)
    except TypeError:
        i = next(i for i, t in enumerate(ids) if not isinstance(t, str))
        raise ValueError(f"rae: key_by='task': trajectory {i} has task id {ids[i]!r} ({type(ids[i]).__name__}); task ids must be non-empty str") from None
    if "" in baselines:
        raise ValueError(f"rae: key_by='task': trajectory {ids.index('')} has an empty task id; give every group a group_id '<task>:<role>'")
    known: Mapping[str, float] = state.get("task_baselines", {})  # a read-only view: only the batch's tasks are read
    if known:
        found = known.get_many(baselines, 0.0) if isinstance(known, StateView) else list(map(known.get, baselines, repeat(0.0)))
        baselines = dict(zip(baselines, found, strict=True))
    if first_rows is None:
        return _scan_in_python(values, ids, baselines, decay), {"task_baselines": updated(known, baselines)}
    names = list(baselines)
    before, final = ema_scan(values, _codes(*first_rows), np.fromiter(baselines.values(), dtype=np.float64, count=len(names)), decay)
    return values - before, {"task_baselines": updated(known, dict(zip(names, final.tolist(), strict=True)))}


def _first_rows(ids: list[str]) -> tuple[dict[str, int], np.ndarray]:
    """Each task's first row (a dict in order of first appearance) and, per row ``(N,)``, its task's first row: one C-level dict call per row."""
    first: dict[str, int] = {}
    rows = np.fromiter(map(first.setdefault, ids, count()), dtype=np.int64, count=len(ids))
    return first, rows


def _codes(first: dict[str, int], rows: np.ndarray) -> np.ndarray:
    """``(N,)`` int64: each row's task numbered ``0 .. len(first) - 1`` in order of first appearance (from :func:`_first_rows`)."""
    number = np.empty(rows.size, dtype=np.int64)
    number[np.fromiter(first.values(), dtype=np.int64, count=len(first))] = np.arange(len(first))
    return number[rows]


def _scan_in_python(values: np.ndarray, ids: list[str], baselines: dict[str, float], decay: float) -> np.ndarray:
    """A small batch's scan row by row (numpy's per-call cost would exceed the work); ``baselines`` updated in place.

    The loop keeps only what must be sequential (the baseline each row reads, and its update); ``(1 - decay) r`` before
    it and ``r - b`` after it are taken in numpy, with the same float64 operations as the loop would.
    """
    read: list[float] = []
    append = read.append
    for kept, task in zip((values * (1.0 - decay)).tolist(), ids, strict=True):
        baseline = baselines[task]
        append(baseline)
        baselines[task] = decay * baseline + kept
    return values - np.fromiter(read, dtype=np.float64, count=values.size)


# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (
    AdvEstimatorSpec(
        "rae",
        batched=rae,
        options=(),
        stateful=True,
        group_order_invariant=False,
        check_options=check_rae_options,
        state_schema=STATE_SCHEMA,
        breaks={"permutation": "each trajectory's baseline is the running mean of those scanned before it: the scan order is part of the estimate"},
    ),
)
