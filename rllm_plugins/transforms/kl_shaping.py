"""``kl_shaping``: per-token KL to the reference folded into the advantage, centred on the batch (SkyRL #1262).

``A_t += coef * (mean KL - KL_t)``: a token whose policy drifted from the reference more than the batch's
average loses advantage, one that drifted less gains; the shift sums to zero over the batch's model tokens.
``KL_t`` is estimated from the sampled token's log-probabilities: ``k1`` (``logprob - ref_logprob``, the
default) or ``k3`` (``exp(ref - logprob) - (ref - logprob) - 1``, Schulman's non-negative estimator).
"""

from __future__ import annotations

import math

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
    advantages: np.ndarray, *, mask: np.ndarray, logprobs: np.ndarray, ref_logprobs: np.ndarray, coef: float = 0.01, estimator: str = "k1"
) -> np.ndarray:
    """``advantages + coef * (mean KL - KL) * mask``, the mean over the model tokens (``mask``) of the batch; ``(B, T)`` in and out."""
    if isinstance(coef, bool) or not isinstance(coef, (int, float)) or not math.isfinite(coef):
        raise ValueError(f"kl_shaping: option 'coef' must be a finite number, got {coef!r}")
    if estimator not in ESTIMATORS:
        raise ValueError(f"kl_shaping: option 'estimator' must be one of {ESTIMATORS}, got {estimator!r}")
    mask = np.asarray(mask, dtype=bool)
    kl = token_kl(np.asarray(logprobs, dtype=np.float64), np.asarray(ref_logprobs, dtype=np.float64), estimator)
    count = int(mask.sum())
    if count == 0:
        return np.array(advantages, copy=True)
    mean = float(kl[mask].sum() / count)
    return np.where(mask, advantages + coef * (mean - kl), advantages)
