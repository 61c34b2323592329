"""What verl's v1 advantage step leaves in TransferQueue, within reach of the ``rllm_*`` estimators.

verl's v1 trainer (``trainer.use_v1``, the default) computes advantages in
``PPOTrainer._compute_advantage(self, batch, metrics)``: it fetches ``uid``, ``response_mask``,
``rm_scores`` and a few log-prob tensors of ``batch.keys`` from TransferQueue, builds a DataProto and
calls ``compute_advantage_for_multi_trajectories``. The same keys hold the rows' ``prompts``,
``responses`` and ``extra_fields`` (the agent loop's dict per output), which step-level estimators need
for anchor states. The extension :data:`V1_BATCH` wraps that method so that, while it runs, the batch
it was given (keys and partition) is visible through a context variable; nothing else changes.
:func:`~rllm_verl.context.fetch_rows` then reads the fields our estimators need for the rows of that batch, once per
advantage step, and :func:`~rllm_verl.context.add_turn_metrics` puts per-turn diagnostics into the step's ``metrics``.

Installed like every verl extension (:mod:`rllm_verl.extension`: lazily, guarded by verl 0.9's
signature, once, never raising); opt out with ``RLLM_PLUGINS_VERL_V1_BATCH=0`` (then step-level
estimators that need anchor states fail on v1 with an error that says so).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from rllm_verl.context import V1_BATCH_ENV, V1_EXTENSION, V1Batch, serving
from rllm_verl.extension import NO_DEFAULT, Extension

__all__ = ["V1_BATCH", "V1_BATCH_ENV"]


def extend(original: Callable[..., Any]) -> Callable[..., Any]:
    """verl's ``PPOTrainer._compute_advantage``, with its batch visible to :func:`~rllm_verl.context.fetch_rows` during the call."""

    @functools.wraps(original)
    def _compute_advantage(self: Any, batch: Any, metrics: Any) -> Any:
        import transfer_queue as tq

        keys = list(batch.keys)
        partition = batch.partition_id
        current = V1Batch(keys, lambda fields: tq.kv_batch_get(keys=keys, partition_id=partition, select_fields=fields))
        with serving(current):
            out = original(self, batch, metrics)
        if isinstance(metrics, dict):
            metrics.update(current.metrics)
        return out

    return _compute_advantage


V1_BATCH = Extension(
    name=V1_EXTENSION,
    module="verl.trainer.ppo.v1.trainer_base",
    attribute="PPOTrainer._compute_advantage",
    parameters=(("self", NO_DEFAULT), ("batch", NO_DEFAULT), ("metrics", NO_DEFAULT)),
    make=extend,
    env=V1_BATCH_ENV,
    requires="v1_trainer",
)
