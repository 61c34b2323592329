"""The spec's per-group helpers: one group's rewards ``(n,)`` -> ``(advantages, returns)``, both ``(n,)``."""

from __future__ import annotations

import numpy as np

from .estimators.grpo import grpo
from .estimators.rloo import rloo


def _one_group(rewards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values = np.asarray(rewards, dtype=np.float64).reshape(-1)
    return values, np.array([0, values.size], dtype=np.int64)


def calculate_grpo_advantages_per_group(
    rewards: np.ndarray, norm_adv_by_std_in_grpo: bool = True, episilon: float = 1e-6, *, epsilon: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """GRPO on one group: (r - mean) / (population std + eps); mean 0, std 1 for a group of 1.

    ``episilon`` is the spec's spelling; ``epsilon`` is accepted too and wins when given.
    """
    values, offsets = _one_group(rewards)
    advantages = grpo(values, offsets, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, epsilon=episilon if epsilon is None else epsilon)
    return advantages, advantages


def calculate_rloo_advantages_per_group(rewards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """RLOO on one group: n/(n-1) * (r - mean); a group of 1 keeps its reward (always a tuple)."""
    values, offsets = _one_group(rewards)
    advantages = rloo(values, offsets)
    return advantages, advantages
