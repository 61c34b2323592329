"""Several reward keys in verl: ``algorithm.gdpo_reward_keys`` with any ``rllm_*`` estimator.

Options, from verl's ``algorithm`` section:

- ``gdpo_reward_keys`` (verl's own key): keys of ``non_tensor_batch`` that hold one score per row,
  as ``compute_score`` returns them in its dict (on verl's v1 trainer, which keeps them in each row's
  ``extra_fields["reward_extra_info"]`` in TransferQueue, read from there: :func:`rllm_verl.context.fetch_rows`).
  When set, a row's rewards are these scores (as in verl's ``gdpo``; ``token_level_rewards`` is not used);
- ``gdpo_reward_weights`` (verl's own key): one weight per key, default 1;
- ``rllm_multi_objective_aggregation``: ``normalize_then_sum`` (default: GDPO, the estimator on each
  key, weighted sum, whitening over the batch) or ``sum_then_normalize`` (the estimator on the
  weighted sum), see :mod:`rllm_plugins.aggregation`.

A None score is missing for that key only (TRL's rule): the key leaves that row out of its group;
a row whose every key is None gets advantage 0. A NaN or inf score is refused, naming the row, its uid
and the key (a NaN is no missing score: write None).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rllm_plugins.aggregation import check_aggregation
from rllm_plugins.calling import as_finite_real, describe
from rllm_verl.context import LEGACY_EXTENSION, REWARD_KEYS_ENV, V1_BATCH_ENV, V1_EXTENSION, current_non_tensor_batch, fetch_rows
from rllm_verl.extension import extension_status

__all__ = ["AGGREGATION_KEY", "KEYS_KEY", "WEIGHTS_KEY", "RewardKeys", "reward_key_options", "reward_table"]

KEYS_KEY = "gdpo_reward_keys"
WEIGHTS_KEY = "gdpo_reward_weights"
AGGREGATION_KEY = "rllm_multi_objective_aggregation"


@dataclass(frozen=True)
class RewardKeys:
    """The reward keys to read, their weights ``(F,)`` (None: all 1) and the aggregation."""

    keys: tuple[str, ...]
    weights: tuple[float, ...] | None
    aggregation: str


def _sequence(value: Any) -> list[Any] | None:
    if value is None or isinstance(value, (str, bytes)) or not (isinstance(value, Sequence) or type(value).__name__ == "ListConfig"):
        return None
    return list(value)


def reward_key_options(config: Any, where: str) -> RewardKeys | None:
    """The reward-key options of verl's ``algorithm`` config, checked; None when ``gdpo_reward_keys`` is unset."""
    if config is None:
        return None
    raw_keys, raw_weights, raw_aggregation = config.get(KEYS_KEY, None), config.get(WEIGHTS_KEY, None), config.get(AGGREGATION_KEY, None)
    if not raw_keys:
        for name, value in ((WEIGHTS_KEY, raw_weights), (AGGREGATION_KEY, raw_aggregation)):
            if value is not None:
                raise ValueError(f"{where}: algorithm.{name} is set but algorithm.{KEYS_KEY} is not; list the reward keys with +algorithm.{KEYS_KEY}=[...]")
        return None
    keys = _sequence(raw_keys)
    if keys is None or not all(isinstance(k, str) and k for k in keys):
        raise ValueError(f"{where}: algorithm.{KEYS_KEY} must be a list of non-empty key names, got {raw_keys!r}")
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ValueError(f"{where}: algorithm.{KEYS_KEY} names {duplicates} more than once")
    weights = None
    if raw_weights is not None:
        values = _sequence(raw_weights)
        if values is None or not all(not isinstance(w, (bool, np.bool_)) and as_finite_real(w) is not None for w in values):
            raise ValueError(f"{where}: algorithm.{WEIGHTS_KEY} must be a list of finite numbers, got {describe(raw_weights)}")
        if len(values) != len(keys):
            raise ValueError(f"{where}: algorithm.{WEIGHTS_KEY} has {len(values)} weights for the {len(keys)} keys {keys}")
        weights = tuple(float(w) for w in values)
    aggregation = check_aggregation("normalize_then_sum" if raw_aggregation is None else raw_aggregation, f"{where}: algorithm.{AGGREGATION_KEY}")
    return RewardKeys(tuple(keys), weights, aggregation)


def _missing_message(where: str, key: str, available: list[str]) -> str:
    message = (
        f"{where}: reward key {key!r} of algorithm.{KEYS_KEY} is not in the batch (non_tensor_batch has {available}); "
        f"make compute_score return a dict with {key!r}."
    )
    if available == ["uid"]:
        state = extension_status().get(V1_EXTENSION, "not installed")
        message += (
            " verl's v1 trainer (trainer.use_v1=True, the default) reads only uid and a few tensors from TransferQueue to compute "
            "advantages; rllm-plugins reads the scores from each row's extra_fields['reward_extra_info'] there, through an extension "
            f"that is {state}" + (f" (unset {V1_BATCH_ENV} to turn it on)." if state.startswith("off") else ".")
        )
    return message


def _v1_columns(index: np.ndarray, keys: Sequence[str], where: str) -> dict[str, np.ndarray]:
    """The scores of ``keys`` from the ``reward_extra_info`` of each row of verl's v1 batch (None where a row has none); ``{}`` outside v1."""
    rows = fetch_rows(index, where)
    if rows is None:
        return {}
    infos = [extra.get("reward_extra_info") or {} for extra in rows.extra_fields]
    columns = {}
    for key in keys:
        if any(key in info for info in infos):
            column = np.empty(len(infos), dtype=object)
            column[:] = [info.get(key) for info in infos]
            columns[key] = column
    return columns


def reward_table(non_tensor_batch: dict[str, Any] | None, keys: Sequence[str], index: np.ndarray, where: str) -> np.ndarray:
    """Scores float64 ``(B, F)`` of ``keys`` from ``non_tensor_batch`` (or the batch ``compute_advantage`` is processing); NaN for None."""
    if non_tensor_batch is None:
        non_tensor_batch = current_non_tensor_batch(index)
    if non_tensor_batch is None and _v1_columns(index, keys, where):  # called inside a v1 advantage step, outside compute_advantage
        non_tensor_batch = {"uid": index}
    if non_tensor_batch is None:
        state = extension_status().get(LEGACY_EXTENSION, "not installed")
        hint = f"; unset {REWARD_KEYS_ENV} to turn it on" if state.startswith("off") else ""
        raise ValueError(
            f"{where}: algorithm.{KEYS_KEY} is set but the per-key scores did not reach the estimator. verl's compute_advantage passes "
            f"non_tensor_batch only to 'gdpo'; rllm-plugins extends it so rllm_* estimators see it, and that extension is {state}{hint}."
        )
    if any(key not in non_tensor_batch for key in keys):
        non_tensor_batch = {**_v1_columns(index, keys, where), **non_tensor_batch}
    rows = len(index)
    table = np.empty((rows, len(keys)), dtype=np.float64, order="F")  # each key's column contiguous, as the aggregation reads them
    columns = []
    for f, key in enumerate(keys):
        if key not in non_tensor_batch:
            raise ValueError(_missing_message(where, key, sorted(non_tensor_batch)))
        column = np.asarray(non_tensor_batch[key])
        columns.append(column)
        if column.shape != (rows,):
            raise ValueError(f"{where}: reward key {key!r} has shape {column.shape} for {rows} rows; it needs one score per row")
        if column.dtype.kind in "USO" and any(isinstance(v, (str, bytes)) for v in column.tolist()):
            raise ValueError(f"{where}: reward key {key!r} holds text, not scores (first value {column[0]!r})")
        try:
            table[:, f] = column.astype(np.float64)  # None -> NaN
        except (TypeError, ValueError):
            raise ValueError(f"{where}: reward key {key!r} must hold numbers or None, got values such as {column[:3].tolist()!r}") from None
    if not np.isfinite(table).all():  # None (missing) became NaN; a NaN or inf score of its own is refused
        for f, key in enumerate(keys):
            for row in np.flatnonzero(~np.isfinite(table[:, f])).tolist():
                if columns[f][row] is not None:
                    raise ValueError(
                        f"{where}: row {row} (uid {index[row]!r}): reward key {key!r} is {table[row, f]}; scores must be finite, or None for a missing one"
                    )
    return table
