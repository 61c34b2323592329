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
    """
    n, k = values.size, initial.size
    before = np.empty(n, dtype=np.float64)
    final = np.array(initial, dtype=np.float64)
    if n == 0:
        return before, final
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    counts = np.bincount(codes, minlength=k)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    position = np.arange(n) - starts[sorted_codes]  # index of each (sorted) row within its key
    r = values[order]
    if decay == 0.0:  # b = the key's previous reward
        previous = np.empty(n)
        previous[1:] = r[:-1]
        first = position == 0
        previous[first] = initial[sorted_codes[first]]
        before[order] = previous
        present = counts > 0
        final[present] = r[starts[present] + counts[present] - 1]
        return before, final
    chunk = max(1, int(_SCALE_LIMIT / -math.log(decay)))
    out = np.empty(n)
    rounds = int(counts.max() + chunk - 1) // chunk
    for c in range(rounds):
        rows = np.flatnonzero((position >= c * chunk) & (position < (c + 1) * chunk))
        keys, row_key = np.unique(sorted_codes[rows], return_inverse=True)
        q = position[rows] - c * chunk
        width = int(q.max()) + 1
        scaled = np.zeros((keys.size, width))
        scaled[row_key, q] = r[rows] * decay ** (-q.astype(np.float64))
        exclusive = np.zeros_like(scaled)
        np.cumsum(scaled[:, :-1], axis=1, out=exclusive[:, 1:])  # sum_{j<q} r_j d^(-j), no cancellation
        b_in = final[keys]
        qf = q.astype(np.float64)
        out[rows] = decay**qf * b_in[row_key] + np.where(q > 0, (1.0 - decay) * decay ** (qf - 1.0) * exclusive[row_key, q], 0.0)
        last = np.zeros(keys.size, dtype=np.int64)
        np.maximum.at(last, row_key, np.arange(rows.size))
        final[keys] = decay * out[rows[last]] + (1.0 - decay) * r[rows[last]]
    before[order] = out
    return before, final


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
    ids = [str(t) if isinstance(t, str) else None for t in task_ids]
    if None in ids:
        i = ids.index(None)
        raise ValueError(f"rae: key_by='task': trajectory {i} has task id {task_ids[i]!r} ({type(task_ids[i]).__name__}); task ids must be non-empty str")
    if "" in ids:
        raise ValueError(f"rae: key_by='task': trajectory {ids.index('')} has an empty task id; give every group a group_id '<task>:<role>'")
    known: dict[str, float] = dict(state.get("task_baselines", {}))
    names = list(dict.fromkeys(ids))
    code_of = {name: i for i, name in enumerate(names)}
    codes = np.fromiter((code_of[t] for t in ids), dtype=np.int64, count=len(ids))
    initial = np.array([float(known.get(name, 0.0)) for name in names])
    before, final = ema_scan(values, codes, initial, decay)
    known.update(zip(names, final.tolist(), strict=True))
    return values - before, {"task_baselines": known}
