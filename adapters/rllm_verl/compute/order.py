"""A task group's episodes in rollout order, whatever order verl's ``_balance_batch`` left the rows in.

GiGPO's similarity grouping (``anchor_similarity``) is first-match greedy: its clusters depend on the order
in which states are visited. verl-agent visits the rows as they arrive; verl's trainers reorder rows to
balance them across ranks, so the same rollouts could cluster differently from one step to the next. The
rule here makes the clusters a function of the rollouts alone:

- v1 trainer: TransferQueue keys are ``{uid}_{session}_{index}``; episodes are visited by session, then by
  output index: the rollout order, so the clusters are verl-agent's on rows in rollout order;
- legacy trainer (rows carry no rollout index): episodes are visited in the order of their anchor-state
  sequences (each state by ``repr``), an order of the content alone;
- within an episode, turns in order (its outputs by index, their turns in order).

An estimator with a running baseline (``rae``) scans the trajectories in order, so its advantages depend on
that order too. On the v1 trainer, :func:`scan_order` gives it one that verl's balancing cannot change: task
groups by ``str(uid)``, their sessions by session id, as the keys say. The legacy trainer's rows carry no
keys: there the scan follows the row order, which ``trainer.balance_batch`` may change.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence

import numpy as np

from rllm_plugins.steps.turns import Turns
from rllm_verl.compute.rows import group_rows

__all__ = ["rollout_order", "scan_order"]


def _session_and_index(key: str, where: str) -> tuple[int, int]:
    parts = key.rsplit("_", 2)
    try:
        return int(parts[1]), int(parts[2])
    except (IndexError, ValueError):
        raise ValueError(f"{where}: TransferQueue key {key!r} is not {{uid}}_{{session}}_{{index}} with integer session and index") from None


def rollout_order(
    rows: np.ndarray, row_offsets: np.ndarray, traj_offsets: np.ndarray, turns: Turns, states: Sequence[Hashable], keys: Sequence[str] | None, where: str
) -> np.ndarray:
    """``(N,)`` the episodes in rollout order, each task group's sorted by ``keys`` (one per row, v1), else by content.

    ``rows`` ``(B,)``, ``row_offsets`` ``(N + 1,)`` and ``traj_offsets`` ``(G + 1,)`` are the episodes' layout
    (:class:`rllm_plugins.layout.Layout`); ``states`` ``(K,)`` the turns' anchor states in turn (row-major) order.
    """
    firsts = rows[row_offsets[:-1]].tolist()
    if keys is not None:
        sort_keys: list[object] = [_session_and_index(keys[row], where) for row in firsts]
    else:
        bounds = turns.row_offsets.tolist()
        per_row = {row: tuple(repr(states[j]) for j in range(bounds[row], bounds[row + 1])) for row in rows.tolist()}
        listed, offsets = rows.tolist(), row_offsets.tolist()
        sort_keys = [tuple(s for row in listed[a:b] for s in per_row[row]) for a, b in itertools.pairwise(offsets)]
    order: list[int] = []
    groups = traj_offsets.tolist()
    for a, b in itertools.pairwise(groups):
        order.extend(sorted(range(a, b), key=sort_keys.__getitem__))
    return np.array(order, dtype=np.int64)


def scan_order(uids: np.ndarray, keys: Sequence[str], where: str, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(order, offsets)``: entries ``(B,)`` (one per trajectory; ``keys`` ``{uid}_{session}_{index}``) grouped by uid with the
    one uid rule (:func:`.rows.group_rows`: ``1`` and ``"1"`` differ, NaN refused), the groups sorted by ``str(uid)`` then the
    uid's type name (an order verl's balancing cannot change) and each group's entries by session and index; ``offsets``
    ``(G + 1,)`` the groups' bounds in that order. ``rows``: each entry's batch row, named in errors."""
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    try:
        grouped, bounds = group_rows(uids, rows)
    except ValueError as error:  # a NaN uid
        raise ValueError(f"{where}: {error}") from None
    members = np.arange(n) if grouped is None else grouped
    sizes = np.diff(bounds)
    group_of = np.empty(n, dtype=np.int64)
    group_of[members] = np.repeat(np.arange(sizes.size), sizes)
    heads = uids[members[bounds[:-1]]].tolist()
    ranked = sorted(range(sizes.size), key=lambda g: (str(heads[g]), type(heads[g]).__name__))
    rank = np.empty(sizes.size, dtype=np.int64)
    rank[ranked] = np.arange(sizes.size)
    sort_keys = [(int(rank[g]), *_session_and_index(key, where)) for g, key in zip(group_of.tolist(), keys, strict=True)]
    order = np.array(sorted(range(n), key=sort_keys.__getitem__), dtype=np.int64)
    offsets = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(sizes[ranked], out=offsets[1:])
    return order, offsets
