"""The estimator: ``A_i = r_i - median_g``, robust to outlier rewards; a group of 1 gets 0."""

from __future__ import annotations

from typing import Any

import numpy as np


def median_baseline(rewards: list[np.ndarray], **kwargs: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Median baseline: reward minus the median reward of its group."""
    advantages = [np.asarray(r, dtype=np.float64) - np.median(r) if len(r) else np.zeros(0) for r in rewards]
    return advantages, advantages
