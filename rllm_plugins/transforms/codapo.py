"""``codapo``: CoDaPO's CoDaWeighting (verl #7497; arXiv 2606.07950): each question's advantages times ``v_q + weight_offset``.

Per task group ``q`` (``offsets``) of ``G`` responses with task scores ``s_i`` and mean token log-probs ``m_i`` under the
rollout policy::

    a_q = (1/G) sum_i [s_i == correct]          (the accuracy; 1 - a_q the difficulty)
    c_q = exp((1/G) sum_i m_i)                   (the confidence)
    v_q = c_q * 4 a_q (1 - a_q)                  (the CoDaValue: largest for questions half solved)
    A_i <- (v_q + weight_offset) * A_i

Responses without a model token (``lengths`` 0: verl's padding rows) are left out of ``a_q`` and ``c_q``. The accuracy
counts the task scores (the ``scores`` context keyword), never the rewards: a reward may carry a penalty (verl's
``algorithm.use_kl_in_reward`` subtracts the KL from ``token_level_rewards``), and then no answer would count as correct.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["codapo"]


def codapo(
    advantages: np.ndarray,
    *,
    offsets: np.ndarray,
    scores: np.ndarray,
    mean_logprobs: np.ndarray,
    lengths: np.ndarray | None = None,
    weight_offset: float = 0.1,
    correct: float = 1.0,
) -> np.ndarray:
    """``(N,)`` advantages reweighted per group by its CoDaValue plus ``weight_offset`` (>= 0); ``correct``: the task score of a correct response."""
    if isinstance(weight_offset, bool) or not isinstance(weight_offset, (int, float)) or not math.isfinite(weight_offset) or weight_offset < 0:
        raise ValueError(f"codapo: option 'weight_offset' must be a finite number >= 0, got {weight_offset!r}")
    if isinstance(correct, bool) or not isinstance(correct, (int, float)) or not math.isfinite(correct):
        raise ValueError(f"codapo: option 'correct' must be a finite number, got {correct!r}")
    sizes = np.diff(offsets)
    group = np.repeat(np.arange(sizes.size), sizes)
    valid = np.ones(advantages.size, dtype=bool) if lengths is None else np.asarray(lengths) > 0
    counts = np.bincount(group[valid], minlength=sizes.size).astype(np.float64)
    right = np.isclose(np.asarray(scores, dtype=np.float64), correct, rtol=0.0, atol=1e-6) & valid
    accuracy = np.bincount(group, right.astype(np.float64), minlength=sizes.size) / np.maximum(counts, 1.0)
    confidence = np.exp(np.bincount(group[valid], np.asarray(mean_logprobs, dtype=np.float64)[valid], minlength=sizes.size) / np.maximum(counts, 1.0))
    value = confidence * 4.0 * accuracy * (1.0 - accuracy)
    return advantages * (value + weight_offset)[group]
