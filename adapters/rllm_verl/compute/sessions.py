"""Agent sessions as rLLM trajectories: one trajectory per session, its advantage on every output.

verl's v1 agent loops may return several outputs per session (context resets, one output per
turn), keyed ``{uid}_{session_id}_{index}``. In rLLM terms a session is one trajectory whose
steps are its outputs: its reward is the reward of its final output (highest ``index``), the
estimator compares the sessions of one prompt (``uid``), and every output of the session gets
the session's advantage. Pure functions over arrays; the verl shell is ``multi_trajectories``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rllm_verl.compute.outcome import group_rows, in_row_order, placed

__all__ = ["Sessions", "first_outputs_only", "parse_sessions", "session_advantages"]


@dataclass(frozen=True)
class Sessions:
    """Which session each row belongs to and which row is each session's final output.

    ``session_of_row`` (B,) int64: the session of each row, sessions numbered in order of first
    appearance; ``final_rows`` (S,) int64: the row of each session's final (highest-index) output;
    ``uids`` (S,) object: the prompt (group) of each session; ``output_index`` (B,) int64: each row's
    output index within its session (the key's last part).
    """

    session_of_row: np.ndarray
    final_rows: np.ndarray
    uids: np.ndarray
    output_index: np.ndarray | None = None

    @property
    def one_output_each(self) -> bool:
        """Whether every session has exactly one output (then sessions and rows coincide)."""
        return len(self.final_rows) == len(self.session_of_row)


def first_outputs_only(keys: Sequence[Any]) -> bool:
    """Whether every key is a distinct ``{uid}_{session_id}_0``: each session has only its first output (the usual case, checked cheaply).

    A repeated or malformed key (``p_0_0`` twice, ``garbage_0``) gives False, so :func:`parse_sessions` names its row.
    """
    texts = [str(key) for key in keys]
    return all(text.endswith("_0") and "_" in text[:-2] for text in texts) and len(set(texts)) == len(texts)


def parse_sessions(keys: Sequence[Any], uids: Sequence[Any]) -> Sessions:
    """Sessions of a batch from its keys ``{uid}_{session_id}_{index}`` (B,) and row uids (B,).

    The uid part may itself contain ``_`` (the key is split at its last two); ``index`` is an
    integer. Raises ``ValueError`` naming the row for a malformed key, an index repeated within a
    session, a session whose rows carry different ``uid`` values, or a uid that is not hashable.
    """
    if np.ndim(uids) != 1:
        raise ValueError(f"uid has shape {np.shape(uids)}; it needs one id per row (1-D): join multi-part ids into one string, e.g. f'{{task}}|{{sample}}'")
    if len(keys) != len(uids):
        raise ValueError(f"{len(keys)} batch keys for {len(uids)} rows; every row needs its key {{uid}}_{{session_id}}_{{index}}")
    code_of: dict[str, int] = {}
    session_of_row = np.empty(len(keys), dtype=np.int64)
    output_index = np.empty(len(keys), dtype=np.int64)
    final_rows: list[int] = []
    final_index: list[int] = []
    for row, key in enumerate(keys):
        head, sep, index_text = str(key).rpartition("_")
        if not sep or "_" not in head:
            raise ValueError(f"row {row}: batch key {key!r} is not of the form {{uid}}_{{session_id}}_{{index}}")
        try:
            index = int(index_text)
        except ValueError:
            raise ValueError(f"row {row}: batch key {key!r} ends in {index_text!r}, not an integer output index") from None
        code = code_of.setdefault(head, len(code_of))
        session_of_row[row] = code
        output_index[row] = index
        if code == len(final_rows):
            try:
                hash(uids[row])
            except TypeError:
                raise ValueError(f"row {row} has uid {uids[row]!r}, a {type(uids[row]).__name__}; a uid must be hashable (a str or an int)") from None
            final_rows.append(row)
            final_index.append(index)
            continue
        first = final_rows[code]
        if uids[row] != uids[first]:
            raise ValueError(f"row {row}: session {head!r} has rows of uid {uids[first]!r} (row {first}) and {uids[row]!r}; a session belongs to one prompt")
        if index == final_index[code]:
            raise ValueError(f"row {row}: batch key {key!r} appears twice (also row {first}); each output of a session needs its own index")
        if index > final_index[code]:
            final_rows[code], final_index[code] = row, index
    finals = np.asarray(final_rows, dtype=np.int64)
    session_uids = np.empty(len(finals), dtype=object)
    session_uids[:] = [uids[row] for row in final_rows]
    return Sessions(session_of_row, finals, session_uids, output_index)


def session_advantages(
    estimate: Callable[..., np.ndarray],
    sessions: Sessions,
    session_rewards: np.ndarray,
    *,
    session_lengths: np.ndarray | None = None,
    real: np.ndarray | None = None,
    grouping: tuple[np.ndarray, np.ndarray] | None = None,
    live: np.ndarray | None = None,
) -> np.ndarray:
    """Advantage of every row (B,) float64: its session's advantage among the sessions of its uid.

    ``estimate(values, offsets, *, lengths, live, not_finite)`` runs the estimator on the sessions as flat groups
    (:func:`rllm_plugins.run.run_outcome`) and gives their advantages; ``session_rewards`` (S,) or (S, F) float64
    are the final outputs' rewards; ``session_lengths`` (S,), ``live`` (S,) bool (the sessions a stateful
    estimator sees) are handed over in the same order; ``not_finite(advantages, what)`` words a non-finite one by
    the session's row. ``real`` (R,), when given, are the sessions with a model token: the others (verl's padding)
    are in no statistic and get 0. ``grouping`` ``(order, offsets)`` over those sessions, when given, replaces their
    grouping by uid in order of first appearance (a running baseline's scan order, :func:`.order.scan_order`).
    """
    rewards = np.asarray(session_rewards, dtype=np.float64)
    uids = sessions.uids
    if real is not None:
        rewards, uids = rewards[real], uids[real]
        session_lengths = None if session_lengths is None else session_lengths[real]
        live = None if live is None else live[real]
    order, offsets = grouping if grouping is not None else group_rows(uids)

    def ordered(x: np.ndarray | None) -> np.ndarray | None:
        return x if x is None or order is None else x[order]

    def per_session(grouped: np.ndarray) -> np.ndarray:
        out = in_row_order(grouped, order)
        return out if real is None else placed(out, real, len(sessions.final_rows))

    def not_finite(grouped: np.ndarray, what: str) -> str:
        every = per_session(grouped)
        s = int(np.flatnonzero(~np.isfinite(every))[0])
        return f"the estimator gave {what} {every[s]} for the session of row {sessions.final_rows[s]} (uid {sessions.uids[s]!r})"

    grouped = estimate(ordered(rewards), offsets, lengths=ordered(session_lengths), live=ordered(live), not_finite=not_finite)
    return per_session(grouped)[sessions.session_of_row]
