"""``whiten``: advantages centred on their batch mean and divided by their batch std (REINFORCE++'s global normalisation).

The statistics are over every unit of the role's batch at once (trajectories, sessions or steps: whatever units the
estimator compared; padding is no unit), each unit weighing 1; ``std=False`` only centres.
"""

from __future__ import annotations

import math

import numpy as np

from ..scaled import power_of_two_scale

__all__ = ["whiten"]


def whiten(advantages: np.ndarray, *, std: bool = True, eps: float = 1e-8) -> np.ndarray:
    """``(a - mean) / (std + eps)`` over the ``(N,)`` advantages (population std); ``std=False``: ``a - mean``. Empty stays empty."""
    if not isinstance(std, (bool, np.bool_)):
        raise ValueError(f"whiten: option 'std' must be a bool, got {type(std).__name__} {std!r}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"whiten: option 'eps' must be a finite number > 0, got {eps!r}")
    values = np.asarray(advantages, dtype=np.float64)
    if values.size == 0:
        return values.copy()
    # on values divided by a power of two near their largest magnitude (exact), so no square or difference overflows
    scale = float(power_of_two_scale(np.abs(values).max()))
    centred = values / scale - (values / scale).mean()
    return centred / (centred.std() + eps / scale) if std else centred * scale
