"""``dapo_overlong``: DAPO's soft overlong punishment (verl's DAPO reward manager, ``overlong_buffer``)."""

from __future__ import annotations

import numpy as np

from ._checks import non_negative, positive_int

__all__ = ["dapo_overlong"]


def dapo_overlong(rewards: np.ndarray, lengths: np.ndarray, *, max_length: int, buffer: int, factor: float = 1.0) -> np.ndarray:
    """``min(0, factor * ((max_length - buffer) - L) / buffer)`` for a unit of ``L`` model tokens ``(N,)``.

    0 while ``L <= max_length - buffer``, falling linearly to ``-factor`` at ``L = max_length`` (and on below it for a
    longer unit, as verl's manager does). ``max_length``: verl's ``data.max_response_length``; ``buffer``:
    ``overlong_buffer.len`` (> 0, at most ``max_length``); ``factor``: ``overlong_buffer.penalty_factor`` (>= 0).
    """
    max_length, buffer, factor = positive_int("max_length", max_length), positive_int("buffer", buffer), non_negative("factor", factor)
    if buffer > max_length:
        raise ValueError(f"buffer must be at most max_length ({max_length}), got {buffer}")
    return np.minimum(factor * ((max_length - buffer) - np.asarray(lengths, dtype=np.float64)) / buffer, 0.0)
