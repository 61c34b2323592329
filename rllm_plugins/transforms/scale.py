"""``scale``: positive advantages times ``positive``, negative ones times ``negative`` (zero stays zero)."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["scale"]


def scale(advantages: np.ndarray, *, positive: float = 1.0, negative: float = 1.0) -> np.ndarray:
    """``a * positive`` where ``a > 0``, ``a * negative`` where ``a < 0``; shape ``(N,)`` or ``(B, T)``, elementwise.

    Both factors must be finite and >= 0 (a negative factor would flip the sign of the update).
    """
    for name, factor in (("positive", positive), ("negative", negative)):
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor < 0:
            raise ValueError(f"scale: option {name!r} must be a finite number >= 0, got {factor!r}")
    return np.where(advantages > 0, advantages * positive, advantages * negative)
