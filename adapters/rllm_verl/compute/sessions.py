"""Agent sessions as rLLM trajectories: one trajectory per session, its advantage on every output.

verl's v1 agent loops may return several outputs per session (context resets, one output per
turn), keyed ``{uid}_{session_id}_{index}``. In rLLM terms a session is one trajectory whose
steps are its outputs: its reward is the reward of its final output (highest ``index``), the
estimator compares the sessions of one prompt (``uid``), and every output of the session gets
the session's advantage. Pure functions over arrays; the walk is :func:`rllm_verl.compute.outcome.compute_rllm_advantage`,
the verl shell :mod:`rllm_verl.patches.sessions`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rllm_plugins.layout import Layout
from rllm_verl.compute.order import scan_order
from rllm_verl.compute.rows import group_rows

__all__ = ["Sessions", "first_outputs_only", "parse_sessions", "session_layout"]


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


def session_layout(sessions: Sessions, keys: Sequence[str] | None, where: str) -> Layout:
    """The batch's :class:`~rllm_plugins.layout.Layout` with every session one unit, its outputs in index order, grouped by
    uid. ``keys`` (one per session, ``{uid}_{session}_{index}``): a running baseline's scan order, by uid and session;
    None: groups by first appearance."""
    if keys is not None:
        order, offsets = scan_order(sessions.uids, keys, where, sessions.final_rows)
    else:
        try:
            order, offsets = group_rows(sessions.uids, sessions.final_rows)
        except ValueError as error:  # a NaN uid, named by its row
            raise ValueError(f"{where}: {error}") from None
    assert sessions.output_index is not None, "parse_sessions gives every row its output index"
    return Layout.from_sessions(sessions.session_of_row, sessions.output_index, sessions.final_rows, order, offsets)
