"""Standardisation that is safe at any scale: ``(v - mean) / (std + eps)`` per group, on values scaled by a power of two.

``(v - mean) / (std + eps)`` is representable for any finite ``v`` (its magnitude is at most ``sqrt(n - 1)``), but
its parts are not: ``v - mean`` overflows for ``[1.7e308, -1.7e308, 1.7e308]`` and the squares of the deviations
overflow from about 1e154. Each group's values are divided by a power of two ``2^e`` close to their largest
magnitude (exact: only the exponent changes) and ``eps`` by the same, so every intermediate is at most a few units
and the result equals the unscaled formula wherever that one does not overflow (up to the rounding of an ``eps``
that falls below the smallest normal float). Used as the fallback of the fast standardisations when they overflow.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .segments import GroupLayout

__all__ = ["power_of_two_scale", "scaled_standardize", "unit_scale_retry"]


def power_of_two_scale(magnitude: np.ndarray) -> np.ndarray:
    """``(G,)`` the power of two ``2^(e - 1)`` for each ``magnitude = m * 2^e`` (``0.5 <= m < 1``); 1 for a magnitude of 0.

    ``magnitude / scale`` is in ``[1, 2)``; the scale is at most ``2^1023``, so it and its inverse are finite.
    """
    _, exponent = np.frexp(np.asarray(magnitude, dtype=np.float64))
    return np.where(magnitude > 0, np.ldexp(1.0, exponent - 1), 1.0)


def scaled_standardize(layout: GroupLayout, values: np.ndarray, *, epsilon: float, ddof: int, single: str) -> np.ndarray:
    """``(v - mean) / (std + eps)`` within each group of ``layout`` ``(N,)``, computed on power-of-two-scaled values.

    ``values`` ``(N,)`` finite float64; std with ``ddof``; ``epsilon`` 0 gives a group without spread 0 (not 0 / 0).
    ``single``: what a group of one gets, ``"unit"`` (mean 0, std 1: ``v / (1 + eps)``, as ``grpo``) or ``"zero"``.
    """
    scale = power_of_two_scale(layout.max(np.abs(values)) if values.size else np.zeros(layout.num_groups))
    scaled = values / layout.expand(scale)
    singles = layout.sizes <= 1
    mean = np.where(singles, 0.0, layout.mean(scaled))
    centred = scaled - layout.expand(mean)
    with np.errstate(invalid="ignore", divide="ignore"):
        std = np.where(singles, 1.0 / scale, layout.std(scaled, mean, ddof=ddof))
    divisor = std + epsilon / scale
    divisor = np.where(divisor > 0, divisor, np.inf)  # no spread and eps 0 (or below the float range): 0, not 0 / 0
    centred /= layout.expand(divisor)
    if single == "zero":
        centred[layout.expand(singles)] = 0.0
    return centred


def unit_scale_retry(
    standardize: Callable[[np.ndarray, float], np.ndarray], values: np.ndarray, epsilon: float, *, first: np.ndarray | None = None
) -> np.ndarray:
    """``standardize(values, epsilon)``, taken again on ``values`` and ``epsilon`` divided by one power of two where it overflows.

    For a role-level standardisation (a centring, then one std over all of ``values`` ``(N,)``): it is unchanged when
    values and eps are scaled together, so the retry's result is the true one wherever that is representable.
    ``standardize`` gets the caller's ``values`` and must not write to them (each returns a new array). ``first``: the
    result of ``standardize(values, epsilon)`` when the caller has it already (not taken again).
    """
    with np.errstate(over="ignore", invalid="ignore"):
        out = standardize(values, epsilon) if first is None else first
    if np.isfinite(out).all() or not np.isfinite(values).all() or values.size == 0:
        return out
    scale = float(power_of_two_scale(np.abs(values).max()))
    return standardize(values / scale, epsilon / scale)
