"""Anchor groups of similar states: GiGPO's similarity grouping (verl-agent ``build_step_group(enable_similarity=True)``).

Within each task group, the distinct anchor states are visited in the order they first appear (trajectory
order, then turn order); each joins the first cluster whose first member it is similar to
(``difflib.SequenceMatcher(None, state, first).ratio() >= threshold``), else starts a cluster. Equal states
always share a cluster, so clustering the distinct states gives what verl-agent's pass over every step row
gives. States must be sequences: text (``str``, as verl-agent requires) or token ids (a tuple), compared
element by element. Cost: per task group, up to ``d * c`` comparisons (``d`` distinct states, ``c``
clusters), each ``O(len(a) * len(b))`` at worst.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .anchors import TokenIds

if TYPE_CHECKING:
    from difflib import SequenceMatcher

__all__ = ["similar_anchor_ids"]


def _similar(matcher: SequenceMatcher, state: Sequence[Hashable], threshold: float) -> bool:
    """``SequenceMatcher(None, state, first).ratio() >= threshold``; the matcher keeps the first member's index, the two upper bounds skip most pairs."""
    matcher.set_seq1(state)
    return matcher.real_quick_ratio() >= threshold and matcher.quick_ratio() >= threshold and matcher.ratio() >= threshold


def _sequence(state: object) -> Sequence[Hashable] | None:
    """What a state is compared as: :class:`TokenIds` as its ids, inside a tuple too (a prompt's ``(tag, ids)``), text and tuples as they are."""
    if isinstance(state, TokenIds):
        return state.ids()
    if isinstance(state, tuple) and any(isinstance(part, TokenIds) for part in state):
        return tuple(item for part in state for item in (part.ids() if isinstance(part, TokenIds) else (part,)))
    return state if isinstance(state, (str, bytes, tuple)) else None


def similar_anchor_ids(
    anchors: np.ndarray,
    states: Sequence[Hashable],
    step_group: np.ndarray,
    threshold: float,
    where: Callable[[int], str] = "step {}".format,
    autojunk: bool = False,
) -> np.ndarray:
    """``(S,)`` int64 cluster ids, dense from 0: ``anchors`` ``(S,)`` (equal-state ids) merged by similarity of ``states`` ``(S,)``.

    ``step_group`` ``(S,)`` is each step's task group (clusters never span two); ``threshold`` in (0, 1];
    ``where(s)`` names step ``s`` in the error raised for a state that is not a sequence; ``autojunk``: difflib's
    heuristic (off: exact ratios; on: verl-agent's, which ignores an element of a first member of 200+ elements that
    makes up more than 1% of it).
    """
    if anchors.size == 0:
        return anchors.copy()
    from difflib import SequenceMatcher  # only with anchor_similarity: not paid by `import rllm_plugins`

    ids, first = np.unique(anchors, return_index=True)  # first step of each anchor id
    order = np.argsort(first, kind="stable")  # anchor ids in order of first appearance
    cluster_of = np.empty(int(ids.max()) + 1, dtype=np.int64)
    clusters: dict[int, list[tuple[SequenceMatcher, int]]] = {}  # task group -> [(matcher of the first member's state, cluster id)]
    count = 0
    for k in order.tolist():
        s = int(first[k])
        comparable = _sequence(states[s])
        if comparable is None:
            state = states[s]
            raise ValueError(
                f"{where(s)}: anchor_similarity compares anchor states as sequences (a str, or a tuple of token ids), "
                f"got {type(state).__name__} {state!r:.60}; give text states or leave anchor_similarity None (equal states only)"
            )
        group = clusters.setdefault(int(step_group[s]), [])
        for matcher, cluster in group:
            if type(matcher.b) is type(comparable) and _similar(matcher, comparable, threshold):
                cluster_of[int(ids[k])] = cluster
                break
        else:
            group.append((SequenceMatcher(None, b=comparable, autojunk=autojunk), count))
            cluster_of[int(ids[k])] = count
            count += 1
    return cluster_of[anchors]
