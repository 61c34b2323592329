"""Entry point of the ``rllm_plugins`` group: contributes the ``median_baseline`` estimator."""

from __future__ import annotations

from collections.abc import Iterable

from rllm_plugins import AdvEstimatorSpec, hookimpl

from .estimator import median_baseline


@hookimpl
def rllm_adv_estimators() -> Iterable[AdvEstimatorSpec]:
    yield AdvEstimatorSpec(name="median_baseline", fn=median_baseline, description="r - group median (robust to outlier rewards)")
