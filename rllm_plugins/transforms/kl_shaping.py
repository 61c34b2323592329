"""``kl_shaping``: per-token KL to the reference folded into the advantage, centred on the batch (SkyRL #1262).

``A_t += coef * (mean KL - KL_t)``: a token whose policy drifted from the reference more than the batch's
average loses advantage, one that drifted less gains; the shift sums to zero over the batch's model tokens.
``KL_t`` is estimated from the sampled token's log-probabilities: ``k1`` (``logprob - ref_logprob``, the
default) or ``k3`` (``exp(ref - logprob) - (ref - logprob) - 1``, Schulman's non-negative estimator). The batch
is the whole batch also where it is split over processes (the ``sum_over_processes`` context keyword).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

__all__ = ["kl_shaping", "token_kl"]

ESTIMATORS = ("k1", "k3")


def token_kl(logprobs: np.ndarray, ref_logprobs: np.ndarray, estimator: str = "k1") -> np.ndarray:
    """Per-token KL estimate, shape of ``logprobs``: ``k1`` = ``logprobs - ref_logprobs``; ``k3`` = ``e^d - d - 1`` with ``d = ref - logprobs``."""
    if estimator == "k1":
        return logprobs - ref_logprobs
    diff = ref_logprobs - logprobs
    return np.expm1(diff) - diff


def kl_shaping(
    advantages: np.ndarray,
    *,
    mask: np.ndarray,
    logprobs: np.ndarray,
    ref_logprobs: np.ndarray,
    coef: float = 0.01,
    estimator: str = "k1",
    sum_over_processes: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """``advantages + coef * (mean KL - KL) * mask``, the mean over the model tokens (``mask``) of the batch; ``(B, T)`` in and out.

    Where the batch is split over processes (TRL), ``sum_over_processes`` sums this process's KL sum and token count with
    every other process's, so the mean is the whole batch's (each process calls it, even one without a model token).
    """
    if isinstance(coef, bool) or not isinstance(coef, (int, float)) or not math.isfinite(coef):
        raise ValueError(f"kl_shaping: option 'coef' must be a finite number, got {coef!r}")
    if estimator not in ESTIMATORS:
        raise ValueError(f"kl_shaping: option 'estimator' must be one of {ESTIMATORS}, got {estimator!r}")
    mask = np.asarray(mask, dtype=bool)
    kl = token_kl(np.asarray(logprobs, dtype=np.float64), np.asarray(ref_logprobs, dtype=np.float64), estimator)
    total, count = float(kl[mask].sum()), float(mask.sum())
    if sum_over_processes is not None:
        summed = np.asarray(sum_over_processes(np.array([total, count], dtype=np.float64)), dtype=np.float64).reshape(-1)
        if summed.shape != (2,) or not np.isfinite(summed).all():
            raise ValueError(f"kl_shaping: sum_over_processes returned {summed.tolist()} for [KL sum, token count]; expected two finite sums")
        total, count = float(summed[0]), float(summed[1])
    if count == 0 or not mask.any():
        return np.array(advantages, copy=True)
    mean = total / count
    return np.where(mask, advantages + coef * (mean - kl), advantages)
