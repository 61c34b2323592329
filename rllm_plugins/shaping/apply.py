"""``shape_rewards``: a list of reward shapers on one role's rewards; the shaped rewards, each term, and metrics."""

from __future__ import annotations

from typing import Any

import numpy as np

from .entries import SelectedShaper, resolve_shapers
from .terms import shape_selected

__all__ = ["shape_rewards"]


def shape_rewards(
    rewards: Any, entries: Any, *, role: str = "all_groups", where: str = "reward_shapers", **context: Any
) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, float]]:
    """``(shaped (N,), terms, metrics)``: ``rewards`` ``(N,)`` plus every term of every shaper in ``entries``, resolved objects
    (:class:`SelectedShaper`) or the raw configuration list; the rest as :func:`~rllm_plugins.shaping.terms.shape_selected`."""
    resolved = entries if all(isinstance(e, SelectedShaper) for e in entries or ()) else resolve_shapers(entries, where)
    return shape_selected(rewards, resolved, role=role, where=where, **context)
