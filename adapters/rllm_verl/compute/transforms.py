"""Advantage transforms on verl's advantages, for any ``adv_estimator`` (verl's own included), legacy and v1.

``algorithm.rllm_advantage_transforms`` (``+algorithm.rllm_advantage_transforms='[{name: clip, max: 2.0}]'``) lists
the transforms. The chain splits where the first token-level transform stands (:func:`rllm_plugins.transforms.split_chain`):

- the **unit part** runs on one value per unit: a row, or a session of a v1 agent loop (one trajectory, however many
  outputs), or a turn at the step level. For ``rllm_*`` estimators it runs inside the estimator's run
  (:func:`rllm_plugins.run.run_outcome` / :func:`~rllm_plugins.run.run_steps`, handed over by :func:`unit_transforms`) on
  the units the estimator compared, exactly as the core collector applies it; for verl's own estimators (``grpo``,
  ``rloo``, ...) :func:`transform_advantages` runs it after verl's call, on the units read back from the batch;
- the **token part** (``kl_shaping`` and every transform after it) runs on ``(B, T)`` advantages with ``mask``
  (``response_mask``), ``logprobs`` (``old_log_probs``) and ``ref_logprobs`` (``ref_log_prob``), after any estimator.

Units read back from a batch (verl's own estimators): rows without a model token (``response_mask`` all 0, as v1's
``_balance_batch`` pads) are no unit and stay 0; after verl's ``grpo`` on v1's multi-output sessions a session is one
unit (verl broadcasts its final output's advantage), after verl's other estimators each output is; units are grouped
by ``uid`` with the one uid rule (:func:`rllm_verl.compute.rows.group_rows`), each with its final output's summed ``token_level_rewards`` as
``rewards`` and summed ``token_level_scores`` as ``scores`` (the task's score: with ``algorithm.use_kl_in_reward`` verl's
rewards carry the KL penalty, its scores do not; a batch without ``token_level_scores`` gives no ``scores``), its model
tokens over all its outputs as ``lengths``, and its mean ``old_log_probs`` as ``mean_logprobs``.
Advantages that differ token by token (``gae``, step-level ones) take elementwise transforms only. ``returns`` are
not changed.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from rllm_plugins.layout import Layout
from rllm_plugins.transform_spec import transform_context
from rllm_plugins.transforms import SelectedTransform, apply_transforms, resolve_transforms, split_chain
from rllm_plugins.transforms.registry import registry_version
from rllm_plugins.transforms.stage import Transforms
from rllm_verl.compute.rows import group_rows
from rllm_verl.compute.sessions import Sessions, session_layout
from rllm_verl.compute.tokens import reward_sums
from rllm_verl.context import current_non_tensor_batch, current_tensor, publish_metrics

__all__ = [
    "CONFIG_KEY",
    "SCORES_KEY",
    "WHERE",
    "current_scores",
    "deferred",
    "transform_advantages",
    "transform_configured",
    "transforms_of",
    "unit_transforms",
]

CONFIG_KEY = "rllm_advantage_transforms"  # +algorithm.rllm_advantage_transforms=[...]
WHERE = f"algorithm.{CONFIG_KEY}"

_resolved: dict[tuple[str, tuple[int, int]], tuple[SelectedTransform, ...]] = {}
_deferred: contextvars.ContextVar[bool] = contextvars.ContextVar("rllm_verl_transforms_deferred", default=False)


def _plain(value: Any) -> Any:
    """An OmegaConf node as plain lists and dicts (verl hands the ``algorithm`` section as a DictConfig)."""
    if hasattr(value, "_get_node") or type(value).__name__ in ("DictConfig", "ListConfig"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(value, resolve=True)
    return value


def transforms_of(config: Any) -> tuple[SelectedTransform, ...]:
    """The transforms ``config`` (verl's ``algorithm`` section) selects, resolved and checked (once per distinct list, while
    the registry is unchanged)."""
    if config is None:
        return ()
    entries = config.get(CONFIG_KEY) if isinstance(config, Mapping) or hasattr(config, "get") else getattr(config, CONFIG_KEY, None)
    entries = _plain(entries)
    if not entries:
        return ()
    key = (repr(entries), registry_version())
    if key not in _resolved:
        _resolved[key] = resolve_transforms(entries, WHERE)
    return _resolved[key]


def unit_transforms(config: Any) -> Transforms | None:
    """The unit part of ``config``'s chain as an ``rllm_*`` estimator's run applies it (None when there is none)."""
    unit_part, _ = split_chain(transforms_of(config))
    return Transforms(unit_part, WHERE) if unit_part else None


TOKEN_KEYS = {"logprobs": "old_log_probs", "ref_logprobs": "ref_log_prob"}  # a token-level transform's context: data.batch's keys


def check_token_part(config: Any, index: Any) -> None:
    """Refuse, naming the batch key, a token part of ``config``'s chain that the batch verl is processing cannot feed (a
    transform requiring ``ref_logprobs`` without ``ref_log_prob``); nothing outside verl's call (nothing runs it there)."""
    _, token_part = split_chain(transforms_of(config))
    if not token_part or current_non_tensor_batch(index) is None:
        return
    for choice in token_part:
        missing = [TOKEN_KEYS[k] for k in choice.transform.spec.requires if k in TOKEN_KEYS and current_tensor(index, TOKEN_KEYS[k]) is None]
        if missing:
            raise ValueError(
                f"{WHERE}: advantage transform {choice.label!r} ({choice.transform.provider}) needs data.batch{missing}, which this batch "
                "has not (verl computes ref_log_prob only with a reference policy, old_log_probs before the update); remove the transform or "
                "run with what it reads"
            )


SCORES_KEY = "token_level_scores"  # the task's scores before verl subtracts the KL penalty (algorithm.use_kl_in_reward)


def current_scores(index: Any) -> np.ndarray | None:
    """``(B,)`` each row's summed ``token_level_scores`` in the batch verl is processing (float64), or None where it has none."""
    scores = current_tensor(index, SCORES_KEY)
    return None if scores is None else reward_sums(scores)


def names_context(transforms: Transforms, key: str) -> bool:
    """Whether a transform of ``transforms`` names the context keyword ``key`` (the run gathers it only then)."""
    return any(key in transform_context(choice.transform.spec) for choice in transforms.selected)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Within the block, :func:`transform_configured` does nothing: the caller transforms the whole batch after it (verl's
    own estimators on v1, whose ``grpo`` computes on a sub-batch of final outputs and copies one value per row back)."""
    token = _deferred.set(True)
    try:
        yield
    finally:
        _deferred.reset(token)


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to("cpu", torch.float64).numpy()


def _read_back(uids: np.ndarray, per_row: np.ndarray, live: np.ndarray, sessions: Sessions | None) -> Layout:
    """The units of a batch verl's own estimator wrote: with ``sessions`` (after verl's ``grpo``, which broadcasts), each
    session, if its live outputs do carry one advantage; else each live row; grouped by uid (:func:`.rows.group_rows`),
    padding rows in none."""
    if sessions is not None and not sessions.one_output_each:
        layout = session_layout(sessions, None, WHERE).keeping_rows(live)
        first = per_row[layout.rows[layout.row_offsets[:-1]]]  # each session's first live output
        if np.array_equal(per_row[layout.rows], np.repeat(first, np.diff(layout.row_offsets))):
            return layout
    try:
        order, offsets = group_rows(uids)
    except (ValueError, TypeError) as error:
        raise ValueError(f"{WHERE}: {error}") from None
    return Layout.one_row_each(order, offsets, uids.size).keeping_rows(live)


def transform_advantages(data: Any, selected: tuple[SelectedTransform, ...], sessions: Sessions | None = None) -> dict[str, float]:
    """Apply ``selected`` to ``data.batch["advantages"]`` (a new tensor, same dtype and device); returns the metrics.

    ``sessions``: the batch's v1 sessions, when it has outputs of multi-output sessions (see the module docstring)."""
    batch = data.batch
    advantages = batch["advantages"]
    mask = _numpy(batch["response_mask"]).astype(bool)
    values = _numpy(advantages)
    tokens = mask.sum(axis=1)
    live = tokens > 0
    if not np.isfinite(values[mask]).all():  # verl's estimator wrote a non-finite advantage: no transform is the cause
        row = int(np.flatnonzero(~np.isfinite(np.where(mask, values, 0.0)).all(axis=1))[0])
        cause = "check the batch's token_level_rewards (a NaN or inf reward)"
        if "token_level_rewards" in batch.keys():  # noqa: SIM118 - a TensorDict
            sums = _numpy(batch["token_level_rewards"]).sum(axis=1)
            if not np.isfinite(sums).all():
                bad = int(np.flatnonzero(~np.isfinite(sums))[0])
                cause = f"row {bad} has reward {sums[bad]}; token_level_rewards must be finite"
        uid = data.non_tensor_batch["uid"][row] if "uid" in data.non_tensor_batch else None
        raise ValueError(f"{WHERE}: the estimator wrote a non-finite advantage in row {row} (uid {uid!r}) before any transform ran: {cause}")
    per_row = np.where(live, values[np.arange(len(values)), mask.argmax(axis=1)], 0.0)  # the value at each row's first model token
    per_unit_form = bool(np.all((values == per_row[:, None]) | ~mask))
    metrics: dict[str, float] = {}
    token_context: dict[str, Any] = {"mask": mask.astype(np.float64)}
    for key, name in TOKEN_KEYS.items():
        if name in batch.keys():  # noqa: SIM118 - a TensorDict
            token_context[key] = _numpy(batch[name])
    unit_part, token_part = split_chain(selected)
    if per_unit_form and unit_part:
        uids = np.asarray(data.non_tensor_batch["uid"], dtype=object) if "uid" in data.non_tensor_batch else np.arange(len(per_row))
        layout = _read_back(uids, per_row, live, sessions)
        units = layout.num_units
        lengths = layout.per_unit(tokens)
        rewards = _numpy(batch["token_level_rewards"]).sum(axis=1) if "token_level_rewards" in batch.keys() else np.zeros(len(per_row))  # noqa: SIM118
        context: dict[str, Any] = {"offsets": layout.unit_offsets, "rewards": rewards[layout.final_rows], "lengths": lengths}
        if SCORES_KEY in batch.keys():  # noqa: SIM118 - the task scores, before any KL penalty; without them no transform gets scores
            context["scores"] = reward_sums(batch[SCORES_KEY])[layout.final_rows]
        if "logprobs" in token_context:  # each unit's mean log-prob of its tokens under the rollout policy (old_log_probs)
            context["mean_logprobs"] = layout.per_unit((token_context["logprobs"] * mask).sum(axis=1)) / np.maximum(lengths, 1)
        context.update(turn_index=np.zeros(units, dtype=np.int64), traj_offsets=np.arange(units + 1))
        out, unit_metrics = apply_transforms(per_row[layout.rows[layout.row_offsets[:-1]]], unit_part, where=WHERE, **context)
        values = layout.to_rows(out)[:, None] * mask
        metrics.update(unit_metrics)
        unit_part = ()
    chain = unit_part + token_part
    if chain:
        out, token_metrics = apply_transforms(values, chain, token_level=True, where=WHERE, **token_context)
        values = out * mask
        metrics.update(token_metrics)
    batch["advantages"] = torch.as_tensor(values, dtype=advantages.dtype).to(advantages.device)
    return {f"rllm/{key}": value for key, value in metrics.items()}


def transform_configured(data: Any, config: Any, *, sessions: Sessions | None = None, units_done: bool = False) -> None:
    """The one call of the patches: run ``config``'s transforms (if any) on ``data``'s advantages and hand their metrics to the logs.

    ``units_done``: an ``rllm_*`` estimator's run applied the unit part already; only the token part is left.
    ``sessions``: the batch's v1 sessions. Nothing happens inside :func:`deferred`."""
    if _deferred.get():
        return
    selected = transforms_of(config)
    if units_done:
        selected = split_chain(selected)[1]
    if selected:
        publish_metrics(data, transform_advantages(data, selected, sessions))
