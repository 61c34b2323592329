"""Advantage transforms on verl's advantages, for any ``adv_estimator`` (verl's own included), legacy and v1.

``algorithm.rllm_advantage_transforms`` (``+algorithm.rllm_advantage_transforms='[{name: clip, max: 2.0}]'``) lists
the transforms; :func:`transform_advantages` runs them on ``data.batch["advantages"]`` right after verl's
``compute_advantage`` wrote them (the patch :mod:`rllm_verl.patches.legacy` calls it; v1 reaches the same function).

Two forms of advantages, decided per batch:

- one value per row (every row's advantage is constant over its ``response_mask``: outcome estimators, verl's
  ``grpo``, ``rloo``, ... and every ``rllm_*`` outcome name): transforms get one value per row, rows grouped by
  ``uid`` (``offsets``; groups in order of first appearance, rows in batch order within a group), ``rewards`` the
  rows' summed ``token_level_rewards``, ``lengths`` their model tokens; the result is broadcast back times the mask;
- per token (``gae``, step-level estimators): elementwise transforms (``clip``, ``scale``) apply token by token
  (for broadcast advantages the two forms agree, which ``rllm-plugins check`` verifies); a transform that needs one
  value per row is a ``ValueError`` naming it.

A token-level transform (``kl_shaping``) gets ``(B, T)`` advantages with ``mask`` (``response_mask``), ``logprobs``
(``old_log_probs``) and ``ref_logprobs`` (``ref_log_prob``, present when the run has a reference policy); after it,
the advantages are per token. Positions outside the mask stay 0. ``returns`` are not changed.

Why here and not in the estimator's run (:func:`rllm_plugins.run.run_outcome`, where the core collector and TRL hand
their transforms over): verl's own estimators (``grpo``, ``gae``, ...) write ``data.batch["advantages"]`` without
any rLLM run, token-level transforms need ``(B, T)`` log-probs no run holds, and the v1 trainer reaches the
advantages through the same ``compute_advantage``; one place after verl's call covers every ``adv_estimator`` alike,
``rllm_*`` names included, so a verl user's transforms never run twice or in two ways.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from rllm_plugins.transforms import SelectedTransform, apply_transforms, resolve_transforms
from rllm_verl.context import publish_metrics

__all__ = ["CONFIG_KEY", "transform_advantages", "transform_configured", "transforms_of"]

CONFIG_KEY = "rllm_advantage_transforms"  # +algorithm.rllm_advantage_transforms=[...]
WHERE = f"algorithm.{CONFIG_KEY}"

_resolved: dict[str, tuple[SelectedTransform, ...]] = {}


def _plain(value: Any) -> Any:
    """An OmegaConf node as plain lists and dicts (verl hands the ``algorithm`` section as a DictConfig)."""
    if hasattr(value, "_get_node") or type(value).__name__ in ("DictConfig", "ListConfig"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(value, resolve=True)
    return value


def transforms_of(config: Any) -> tuple[SelectedTransform, ...]:
    """The transforms ``config`` (verl's ``algorithm`` section) selects, resolved and checked (once per distinct list)."""
    if config is None:
        return ()
    entries = config.get(CONFIG_KEY) if isinstance(config, Mapping) or hasattr(config, "get") else getattr(config, CONFIG_KEY, None)
    entries = _plain(entries)
    if not entries:
        return ()
    key = repr(entries)
    if key not in _resolved:
        _resolved[key] = resolve_transforms(entries, WHERE)
    return _resolved[key]


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to("cpu", torch.float64).numpy()


def _row_groups(uids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(order, offsets)``: rows reordered so that each uid's rows are contiguous (uids by first appearance), and the groups' bounds."""
    _, first, inverse = np.unique(uids.astype(str), return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))[inverse]  # each row's group, numbered by first appearance
    order = np.argsort(rank, kind="stable")
    sizes = np.bincount(rank)
    return order, np.concatenate([[0], np.cumsum(sizes)])


def transform_advantages(data: Any, selected: tuple[SelectedTransform, ...]) -> dict[str, float]:
    """Apply ``selected`` to ``data.batch["advantages"]`` in place (a new tensor, same dtype and device); returns the metrics."""
    batch = data.batch
    advantages = batch["advantages"]
    mask = _numpy(batch["response_mask"]).astype(bool)
    values = _numpy(advantages)
    tokens = mask.sum(axis=1)
    per_row = np.where(tokens > 0, values[np.arange(len(values)), mask.argmax(axis=1)], 0.0)  # the value at each row's first model token
    rowwise = bool(np.all((values == per_row[:, None]) | ~mask))
    metrics: dict[str, float] = {}
    token_context: dict[str, Any] = {"mask": mask.astype(np.float64)}
    for key, name in (("logprobs", "old_log_probs"), ("ref_logprobs", "ref_log_prob")):
        if name in batch.keys():  # noqa: SIM118 - a TensorDict
            token_context[key] = _numpy(batch[name])
    row_context: dict[str, Any] | None = None
    order: np.ndarray | None = None
    for choice in selected:
        if rowwise and choice.transform.spec.level == "sequence":
            if row_context is None:
                uids = np.asarray(data.non_tensor_batch["uid"], dtype=object) if "uid" in data.non_tensor_batch else np.arange(len(per_row))
                order, offsets = _row_groups(uids)
                rewards = _numpy(batch["token_level_rewards"]).sum(axis=1) if "token_level_rewards" in batch.keys() else np.zeros(len(per_row))  # noqa: SIM118
                row_context = {"offsets": offsets, "rewards": rewards[order], "lengths": tokens[order].astype(np.float64)}
                if "logprobs" in token_context:  # each row's mean log-prob of its tokens under the rollout policy (old_log_probs)
                    row_context["mean_logprobs"] = ((token_context["logprobs"] * mask).sum(axis=1) / np.maximum(tokens, 1))[order]
                row_context.update(turn_index=np.zeros(len(per_row), dtype=np.int64), traj_offsets=np.arange(len(per_row) + 1))
            assert order is not None
            out, step_metrics = apply_transforms(per_row[order], (choice,), where=WHERE, **row_context)
            per_row = np.empty_like(out)
            per_row[order] = out
            values = per_row[:, None] * mask
        else:
            if rowwise:
                values = per_row[:, None] * mask
                rowwise = False
            out, step_metrics = apply_transforms(values, (choice,), token_level=True, where=WHERE, **token_context)
            values = out * mask
        metrics.update({f"rllm/{key}": value for key, value in step_metrics.items()})
    batch["advantages"] = torch.as_tensor(values, dtype=advantages.dtype).to(advantages.device)
    return metrics


def transform_configured(data: Any, config: Any) -> None:
    """The one call of the patches: run ``config``'s transforms (if any) on ``data``'s advantages and hand their metrics to the logs."""
    selected = transforms_of(config)
    if selected:
        publish_metrics(data, transform_advantages(data, selected))
