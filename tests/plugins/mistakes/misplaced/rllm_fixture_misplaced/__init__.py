"""A working plugin, ``max_baseline`` (A = r - group max), that nothing loads: its entry-point group is misspelt."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from rllm_plugins import AdvEstimatorSpec, hookimpl


def max_baseline(rewards: list[np.ndarray], **kwargs: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Reward minus the best reward of its group."""
    advantages = [np.asarray(r, dtype=np.float64) - np.max(r) if len(r) else np.zeros(0) for r in rewards]
    return advantages, advantages


@hookimpl
def rllm_adv_estimators() -> Iterable[AdvEstimatorSpec]:
    yield AdvEstimatorSpec("max_baseline", fn=max_baseline)
