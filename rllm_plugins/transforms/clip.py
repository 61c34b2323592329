"""``clip``: advantages limited to ``[min, max]`` (NeMo-RL's advantage clipping); either bound may be left open."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["clip"]


def clip(advantages: np.ndarray, *, min: float | None = None, max: float | None = None) -> np.ndarray:
    """``np.clip(advantages, min, max)``; ``None`` leaves that side open. Shape ``(N,)`` or ``(B, T)``, elementwise."""
    for name, bound in (("min", min), ("max", max)):
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound)):
            raise ValueError(f"clip: option {name!r} must be a finite number or None, got {bound!r}")
    if min is None and max is None:
        raise ValueError("clip: set 'min', 'max' or both (with neither it changes nothing)")
    if min is not None and max is not None and min > max:
        raise ValueError(f"clip: option 'min' ({min}) is greater than 'max' ({max})")
    return np.clip(advantages, min, max)
