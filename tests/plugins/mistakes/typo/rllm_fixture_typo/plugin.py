"""The plugin the entry points meant: ``typo_baseline`` (A = r - group mean), as a module and as ``Hooks``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from rllm_plugins import AdvEstimatorSpec, hookimpl


def typo_baseline(rewards: list[np.ndarray], **kwargs: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Reward minus the group mean."""
    advantages = [np.asarray(r, dtype=np.float64) - np.mean(r) if len(r) else np.zeros(0) for r in rewards]
    return advantages, advantages


@hookimpl
def rllm_adv_estimators() -> Iterable[AdvEstimatorSpec]:
    yield AdvEstimatorSpec("typo_baseline", fn=typo_baseline)


class Hooks:
    """The same hook on an object."""

    @hookimpl
    def rllm_adv_estimators(self) -> Iterable[AdvEstimatorSpec]:
        yield AdvEstimatorSpec("typo_baseline", fn=typo_baseline)
