"""``turn_penalty``: a cost per model turn beyond a free allowance, for agents that should finish in fewer turns."""

from __future__ import annotations

import numpy as np

from ._checks import flag, non_negative

__all__ = ["turn_penalty"]


def turn_penalty(
    rewards: np.ndarray,
    turns: np.ndarray,
    scores: np.ndarray | None = None,
    *,
    coef: float,
    free_turns: int = 0,
    only_successful: bool = False,
    threshold: float = 0.0,
) -> np.ndarray:
    """``-coef * max(0, turns - free_turns)`` per unit ``(N,)``; with ``only_successful``, 0 for a unit whose score
    (``scores``, else the reward) is not above ``threshold`` (a failed attempt is not pushed to give up early)."""
    coef, only_successful = non_negative("coef", coef), flag("only_successful", only_successful)
    if isinstance(free_turns, bool) or not isinstance(free_turns, (int, np.integer)) or free_turns < 0:
        raise ValueError(f"free_turns must be an int >= 0, got {type(free_turns).__name__} {free_turns!r}")
    term = -coef * np.maximum(np.asarray(turns, dtype=np.float64) - free_turns, 0.0)
    return np.where(np.asarray(rewards if scores is None else scores) > threshold, term, 0.0) if only_successful else term
