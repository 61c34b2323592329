"""What verl's current advantage call is processing, within reach of the ``rllm_*`` estimators.

Two patches (:mod:`rllm_verl.patches.legacy` on ``compute_advantage``, :mod:`rllm_verl.patches.v1` on
v1's ``PPOTrainer._compute_advantage``) set the context variables below for the duration of verl's call;
the compute modules (:mod:`rllm_verl.compute`) only read them. Keeping the readers here is what lets
``compute/`` never import ``patches/``.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
import torch

__all__ = [
    "LEGACY_EXTENSION",
    "REWARD_KEYS_ENV",
    "V1_BATCH_ENV",
    "V1_EXTENSION",
    "V1Batch",
    "TRANSFORM_METRICS_KEY",
    "V1Rows",
    "VERL_ARGUMENTS",
    "add_turn_metrics",
    "announce_provenance",
    "publish_current",
    "publish_metrics",
    "algorithm_value",
    "current_arguments",
    "current_keys",
    "current_non_tensor_batch",
    "current_tensor",
    "fetch_rows",
    "processing",
    "quiet_provenance",
    "serving",
    "verl_arguments",
]

# the two patches' names (as ``extension_status`` reports them) and their opt-out variables, named in error messages
LEGACY_EXTENSION = "reward_keys"
REWARD_KEYS_ENV = "RLLM_PLUGINS_VERL_REWARD_KEYS"
V1_EXTENSION = "v1_batch"
V1_BATCH_ENV = "RLLM_PLUGINS_VERL_V1_BATCH"

_legacy_batch: contextvars.ContextVar[Any] = contextvars.ContextVar("rllm_verl_batch", default=None)
# what verl's ``compute_advantage`` (and v1's ``compute_advantage_for_multi_trajectories``) takes beside the batch, the
# estimator's name and the config, and gives only to its own estimators (``gae``: gamma and lam; ``grpo``: the norm flag)
VERL_ARGUMENTS = ("gamma", "lam", "norm_adv_by_std_in_grpo")
_arguments: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar("rllm_verl_arguments", default=MappingProxyType({}))


def current_arguments() -> Mapping[str, Any]:
    """The :data:`VERL_ARGUMENTS` the current call was given explicitly (by verl's ``compute_advantage``, v1's
    ``compute_advantage_for_multi_trajectories``, or as keywords of the registered ``rllm_*`` function); empty outside a call."""
    return _arguments.get()


@contextlib.contextmanager
def verl_arguments(given: Mapping[str, Any]) -> Iterator[None]:
    """Make the :data:`VERL_ARGUMENTS` in ``given`` (others are left out) what :func:`current_arguments` returns for the
    duration of a call, over those of an enclosing call."""
    token = _arguments.set(MappingProxyType({**_arguments.get(), **{k: v for k, v in given.items() if k in VERL_ARGUMENTS}}))
    try:
        yield
    finally:
        _arguments.reset(token)


def algorithm_value(key: str, config: Any) -> tuple[Any, str]:
    """``algorithm.<key>`` when the config has it, else the argument ``key`` of the current call (:func:`current_arguments`),
    else None; with where it came from. verl's trainers pass both, equal; a call without a config gives only the argument."""
    if config is not None and config.get(key, None) is not None:
        return config.get(key), f"algorithm.{key}"
    if key in current_arguments():
        return current_arguments()[key], f"the {key} argument of compute_advantage"
    return None, "the estimator's default"


def current_non_tensor_batch(index: Any) -> dict[str, Any] | None:
    """The ``non_tensor_batch`` of the DataProto that ``compute_advantage`` is processing, if ``index`` is its ``uid`` array."""
    data = _legacy_batch.get()
    if data is None:
        return None
    non_tensor = getattr(data, "non_tensor_batch", None)
    if not isinstance(non_tensor, dict) or non_tensor.get("uid") is not index:
        return None
    return non_tensor


def current_tensor(index: Any, key: str) -> Any:
    """``batch[key]`` of the DataProto that ``compute_advantage`` is processing (if ``index`` is its ``uid`` array), else None."""
    data = _legacy_batch.get()
    if data is None or current_non_tensor_batch(index) is None:
        return None
    tensors = getattr(data, "batch", None)
    return tensors[key] if tensors is not None and key in tensors else None


@contextlib.contextmanager
def processing(data: Any, given: Mapping[str, Any]) -> Iterator[None]:
    """Make ``data`` (the legacy DataProto) and the arguments ``given`` what this module's readers return for the duration of a call."""
    token = _legacy_batch.set(data)
    try:
        with verl_arguments(given):
            yield
    finally:
        _legacy_batch.reset(token)


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


_v1_batch: contextvars.ContextVar[V1Batch | None] = contextvars.ContextVar("rllm_verl_v1_batch", default=None)


@contextlib.contextmanager
def serving(batch: V1Batch) -> Iterator[V1Batch]:
    """Make ``batch`` the current v1 batch for the duration of a ``with`` block."""
    token = _v1_batch.set(batch)
    try:
        yield batch
    finally:
        _v1_batch.reset(token)


def _as_list(values: Any) -> list[Any]:
    """A TensorDict field as a list of B entries: a (nested) tensor's rows, a non-tensor stack's items."""
    return list(values.unbind(0)) if isinstance(values, torch.Tensor) else list(values)


def fetch_rows(index: Sequence[Any] | np.ndarray, where: str) -> V1Rows | None:
    """``prompts``, ``responses`` and ``extra_fields`` of the current v1 batch's rows (None outside a v1 advantage step).

    The rows must be the batch's rows in key order (``index``, the ``uid`` per row, is compared): a
    mismatch means the DataProto is not the one verl built for the batch, and raises ``ValueError``.
    """
    batch = _v1_batch.get()
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
    batch = _v1_batch.get()
    if batch is None or fetch_rows(index, where) is None:
        return None
    return batch.keys


def add_turn_metrics(compute: Callable[[], dict[str, float]]) -> None:
    """Inside a v1 advantage step, add ``compute()`` (per-turn diagnostics) to the step's ``metrics``; elsewhere nothing reads them, so nothing is computed."""
    batch = _v1_batch.get()
    if batch is not None:
        batch.metrics.update(compute())


TRANSFORM_METRICS_KEY = "rllm_transform_metrics"  # DataProto.meta_info key: the legacy trainer's metrics of the advantage transforms


def publish_metrics(data: Any, metrics: dict[str, float]) -> None:
    """Hand ``metrics`` to the trainer's logs: inside a v1 advantage step into the step's ``metrics``; on the legacy trainer into
    ``data.meta_info[TRANSFORM_METRICS_KEY]``, which the extension of ``compute_data_metrics`` adds to the step's metrics."""
    batch = _v1_batch.get()
    if batch is not None:
        batch.metrics.update(metrics)
        return
    meta = getattr(data, "meta_info", None)
    if isinstance(meta, dict):
        meta.setdefault(TRANSFORM_METRICS_KEY, {}).update(metrics)


def publish_current(metrics: dict[str, float], prefix: str = "") -> None:
    """:func:`publish_metrics` for the batch verl is processing (v1's advantage step, or the legacy ``compute_advantage``'s
    DataProto), each key with ``prefix``; outside both (a direct call of an estimator) nothing reads them."""
    if not metrics:
        return
    prefixed = {f"{prefix}{key}": value for key, value in metrics.items()}
    batch = _v1_batch.get()
    if batch is not None:
        batch.metrics.update(prefixed)
        return
    data = _legacy_batch.get()
    if data is not None:
        publish_metrics(data, prefixed)


# ---------------------------------------------------------------- which code computes the advantages
#
# verl's trackers take numbers: the console drops strings, TensorBoard's add_scalar and MLflow's log_metrics fail on
# them. So the provenance line goes to the console of the process that computes the advantages (the one running
# fit: verl's TaskRunner, whose output Ray shows on the driver), once per process and again when it changes.

PROVENANCE_PREFIX = "rllm-plugins: advantages computed by "
_announced: list[str] = []  # the last line printed in this process
_quiet: contextvars.ContextVar[bool] = contextvars.ContextVar("rllm_verl_provenance_quiet", default=False)


def announce_provenance(line: str) -> None:
    """Print ``PROVENANCE_PREFIX + line`` to stderr when it differs from the last line printed in this process (the first
    advantage step of a run, and each change); nothing inside :func:`quiet_provenance`."""
    if _quiet.get() or (_announced and _announced[-1] == line):
        return
    _announced[:] = [line]
    print(f"{PROVENANCE_PREFIX}{line}", file=sys.stderr, flush=True)  # stderr: a command's output (a JSON report) stays clean


@contextlib.contextmanager
def quiet_provenance() -> Iterator[None]:
    """Within the block no provenance line is printed (``verl-check``'s and ``verl-rehearse``'s trial runs, which report it)."""
    token = _quiet.set(True)
    try:
        yield
    finally:
        _quiet.reset(token)
