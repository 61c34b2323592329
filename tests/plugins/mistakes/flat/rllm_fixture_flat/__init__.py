"""A broken estimator, ``flat_baseline``: one flat list of every trajectory's advantage instead of one array per group.

With groups of one response the flat list has one number per group, so the mistake only shows
with larger groups.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from rllm_plugins import AdvEstimatorSpec, hookimpl


def flat_baseline(rewards: list[np.ndarray], **kwargs: Any) -> tuple[list[float], list[float]]:
    """Reward minus the group mean, returned flat (the mistake)."""
    flat = [float(x) for r in rewards for x in np.asarray(r, dtype=np.float64) - (np.mean(r) if len(r) > 1 else 0.0)]
    return flat, flat


@hookimpl
def rllm_adv_estimators() -> Iterable[AdvEstimatorSpec]:
    yield AdvEstimatorSpec("flat_baseline", fn=flat_baseline)
