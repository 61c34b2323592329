"""``group_length_penalty``: miles' group-relative length penalty (its Search-R1 example): successes much longer than the
group's short successes pay, down to a floor."""

from __future__ import annotations

import numpy as np

from ._checks import non_negative

__all__ = ["group_length_penalty"]


def group_length_penalty(
    rewards: np.ndarray,
    offsets: np.ndarray,
    lengths: np.ndarray,
    scores: np.ndarray | None = None,
    *,
    success_threshold: float = 1.0,
    beta: float = 0.1,
    cap: float = 0.2,
    ref_quantile: float = 0.25,
    relative_slack: float = 0.1,
    absolute_slack: float = 16.0,
    success_floor: float = 0.8,
) -> np.ndarray:
    """``max(min(success_floor, r), r - pen) - r`` for a success (``r >= success_threshold``, ``r`` its score: ``scores``, else
    the reward) in a group with at least two, else 0 ``(N,)``.

    ``ref = max(1, quantile of the group's successes' model tokens at ref_quantile)`` (linear interpolation),
    ``allowed = ref (1 + relative_slack) + absolute_slack``, ``pen = min(cap, beta max(0, L - allowed) / ref)``.
    """
    beta, cap = non_negative("beta", beta), non_negative("cap", cap)
    relative_slack, absolute_slack = non_negative("relative_slack", relative_slack), non_negative("absolute_slack", absolute_slack)
    if isinstance(ref_quantile, bool) or not isinstance(ref_quantile, (int, float, np.number)) or not 0.0 <= ref_quantile <= 1.0:
        raise ValueError(f"ref_quantile must be a number in [0, 1], got {ref_quantile!r}")
    values = np.asarray(rewards if scores is None else scores, dtype=np.float64)
    tokens = np.asarray(lengths, dtype=np.float64)
    term = np.zeros(values.size)
    if beta <= 0 or cap <= 0:
        return term
    for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
        success = np.flatnonzero(values[start:end] >= success_threshold) + start
        if success.size < 2:
            continue
        ref = max(1.0, float(np.quantile(tokens[success], ref_quantile)))
        allowed = ref * (1.0 + relative_slack) + absolute_slack
        penalty = np.minimum(cap, beta * np.maximum(0.0, tokens[success] - allowed) / ref)
        term[success] = np.maximum(np.minimum(success_floor, values[success]), values[success] - penalty) - values[success]
    return term
