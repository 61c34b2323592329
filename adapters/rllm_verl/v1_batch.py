"""What verl's v1 advantage step leaves in TransferQueue, within reach of the ``rllm_*`` estimators.

verl's v1 trainer (``trainer.use_v1``, the default) computes advantages in
``PPOTrainer._compute_advantage(self, batch, metrics)``: it fetches ``uid``, ``response_mask``,
``rm_scores`` and a few log-prob tensors of ``batch.keys`` from TransferQueue, builds a DataProto and
calls ``compute_advantage_for_multi_trajectories``. The same keys hold the rows' ``prompts``,
``responses`` and ``extra_fields`` (the agent loop's dict per output), which step-level estimators need
for anchor states. The extension :data:`V1_BATCH` wraps that method so that, while it runs, the batch
it was given (keys and partition) is visible through a context variable; nothing else changes.
:func:`fetch_rows` then reads the fields our estimators need for the rows of that batch, once per
advantage step, and :func:`add_turn_metrics` puts per-turn diagnostics into the step's ``metrics``.

Installed like every verl extension (:mod:`rllm_verl.extension`: lazily, guarded by verl 0.9's
signature, once, never raising); opt out with ``RLLM_PLUGINS_VERL_V1_BATCH=0`` (then step-level
estimators that need anchor states fail on v1 with an error that says so).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .extension import NO_DEFAULT, Extension

__all__ = ["V1_BATCH", "V1_BATCH_ENV", "V1Batch", "V1Rows", "add_turn_metrics", "current_keys", "fetch_rows", "serving"]

V1_BATCH_ENV = "RLLM_PLUGINS_VERL_V1_BATCH"
FIELDS = ("uid", "prompts", "responses", "extra_fields")


@dataclass(frozen=True)
class V1Rows:
    """The rows of a v1 batch, in key order: ``uids`` (B,) object; ``prompts`` and ``responses``: B 1-D int tensors
    (each row's own tokens, no padding); ``extra_fields``: B dicts (empty where the agent loop set none)."""

    uids: np.ndarray
    prompts: list[Any]
    responses: list[Any]
    extra_fields: list[dict[str, Any]]


@dataclass
class V1Batch:
    """The batch ``_compute_advantage`` is processing: its keys, and ``fetch(fields)`` reading them (TransferQueue's ``kv_batch_get``)."""

    keys: list[str]
    fetch: Callable[[list[str]], Any]
    rows: V1Rows | None = None
    metrics: dict[str, float] = field(default_factory=dict)


_batch: contextvars.ContextVar[V1Batch | None] = contextvars.ContextVar("rllm_verl_v1_batch", default=None)


@contextlib.contextmanager
def serving(batch: V1Batch) -> Iterator[V1Batch]:
    """Make ``batch`` the current v1 batch for the duration of a ``with`` block."""
    token = _batch.set(batch)
    try:
        yield batch
    finally:
        _batch.reset(token)


def _as_list(values: Any) -> list[Any]:
    """A TensorDict field as a list of B entries: a (nested) tensor's rows, a non-tensor stack's items."""
    return list(values.unbind(0)) if isinstance(values, torch.Tensor) else list(values)


def fetch_rows(index: Sequence[Any] | np.ndarray, where: str) -> V1Rows | None:
    """``prompts``, ``responses`` and ``extra_fields`` of the current v1 batch's rows (None outside a v1 advantage step).

    The rows must be the batch's rows in key order (``index``, the ``uid`` per row, is compared): a
    mismatch means the DataProto is not the one verl built for the batch, and raises ``ValueError``.
    """
    batch = _batch.get()
    if batch is None:
        return None
    if batch.rows is None:
        data = batch.fetch(list(FIELDS))
        uids = np.array(_as_list(data["uid"]), dtype=object)
        extra = _as_list(data["extra_fields"]) if "extra_fields" in data.keys() else [None] * uids.size  # noqa: SIM118 - a TensorDict
        batch.rows = V1Rows(uids, _as_list(data["prompts"]), _as_list(data["responses"]), [e if isinstance(e, dict) else {} for e in extra])
    rows = batch.rows
    given = np.asarray(index, dtype=object).tolist()
    if len(given) != rows.uids.size or given != rows.uids.tolist():
        raise ValueError(
            f"{where}: the batch has {len(given)} rows, but verl's v1 advantage step is processing {rows.uids.size} keys with other uids; "
            "the token ids and reward-key scores rllm_* estimators need there are read from TransferQueue for those keys, so compute "
            "advantages on the DataProto that PPOTrainer._compute_advantage builds (rows in key order)"
        )
    return rows


def current_keys(index: Sequence[Any] | np.ndarray, where: str) -> list[str] | None:
    """The TransferQueue keys (``{uid}_{session}_{index}``) of the current v1 batch's rows, in row order (None outside a v1 advantage step)."""
    batch = _batch.get()
    if batch is None or fetch_rows(index, where) is None:
        return None
    return batch.keys


def add_turn_metrics(compute: Callable[[], dict[str, float]]) -> None:
    """Inside a v1 advantage step, add ``compute()`` (per-turn diagnostics) to the step's ``metrics``; elsewhere nothing reads them, so nothing is computed."""
    batch = _batch.get()
    if batch is not None:
        batch.metrics.update(compute())


def extend(original: Callable[..., Any]) -> Callable[..., Any]:
    """verl's ``PPOTrainer._compute_advantage``, with its batch visible to :func:`fetch_rows` during the call."""

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
    name="v1_batch",
    module="verl.trainer.ppo.v1.trainer_base",
    attribute="PPOTrainer._compute_advantage",
    parameters=(("self", NO_DEFAULT), ("batch", NO_DEFAULT), ("metrics", NO_DEFAULT)),
    make=extend,
    env=V1_BATCH_ENV,
)
