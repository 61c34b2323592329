"""Put the advantage transforms' metrics into the legacy trainer's logs.

The legacy ``RayPPOTrainer.fit`` logs ``compute_data_metrics(batch=batch, ...)`` of the batch whose advantages
:mod:`rllm_verl.patches.legacy` transformed; the transforms' metrics travel in that batch's
``meta_info[TRANSFORM_METRICS_KEY]``. The extension :data:`TRANSFORM_METRICS` wraps the name
``compute_data_metrics`` of ``verl.trainer.ppo.ray_trainer`` (the one ``fit`` calls) to add them. v1 needs no
extension: its advantage step hands them to the step's ``metrics`` (:func:`rllm_verl.context.publish_metrics`).
Opt out with ``RLLM_PLUGINS_VERL_TRANSFORM_METRICS=0``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from rllm_verl.context import TRANSFORM_METRICS_KEY
from rllm_verl.extension import NO_DEFAULT, Extension

__all__ = ["TRANSFORM_METRICS", "TRANSFORM_METRICS_ENV"]

TRANSFORM_METRICS_ENV = "RLLM_PLUGINS_VERL_TRANSFORM_METRICS"


def extend(original: Callable[..., Any]) -> Callable[..., Any]:
    """verl's ``compute_data_metrics``, plus the transforms' metrics the batch carries."""

    @functools.wraps(original)
    def compute_data_metrics(batch: Any, use_critic: bool = True) -> Any:
        metrics = original(batch, use_critic)
        meta = getattr(batch, "meta_info", None)
        if isinstance(meta, dict) and isinstance(metrics, dict):
            metrics.update(meta.pop(TRANSFORM_METRICS_KEY, {}))
        return metrics

    return compute_data_metrics


TRANSFORM_METRICS = Extension(
    name="transform_metrics",
    module="verl.trainer.ppo.ray_trainer",
    attribute="compute_data_metrics",
    parameters=(("batch", NO_DEFAULT), ("use_critic", True)),
    make=extend,
    env=TRANSFORM_METRICS_ENV,
)
