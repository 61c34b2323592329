"""The functional step of the TRL adapter: gathered reward batch -> rLLM advantages (+ metrics).

TRL's ``GRPOTrainer`` gathers the rewards of every process into ``rewards_per_func`` of shape
``(N, F)`` (``N`` completions, prompt-major with ``G = num_generations`` contiguous rows per
prompt; ``F`` reward functions; NaN where a function returned None). This module combines them
exactly as TRL does and runs an rLLM estimator on the groups:

- combined reward ``r = nansum(rewards_per_func * weights, axis=1)`` in float32 (TRL's numbers);
- a row where every function returned None is *unscorable*: it is left out of its group's
  statistics and gets advantage 0;
- each role (``roles``, one name per row; ``"all_groups"`` without one) runs its estimator once
  on the float64 batched form over all of its groups.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rllm_plugins.advantage import compute_role_metrics
from rllm_plugins.diagnostics import batch_diagnostics
from rllm_plugins.outputs import as_advantages
from rllm_plugins.registry import get_estimator
from rllm_plugins.segments import offsets_from_sizes

__all__ = ["DEFAULT_ROLE", "RewardBatch", "combine_rewards", "compute_advantages", "compute_metrics", "prepare_batch"]

DEFAULT_ROLE = "all_groups"  # TrajectoryGroup.group_role of a group_id without a role


@dataclass(frozen=True)
class RewardBatch:
    """A gathered reward batch in the form the estimators take.

    ``rewards`` float64 ``(N,)`` combined rewards (NaN on unscorable rows), ``scorable`` bool
    ``(N,)``, ``num_generations`` rows per group, ``roles`` the distinct role names (first
    appearance first), ``group_roles`` int64 ``(N // G,)`` index into ``roles`` of each group,
    ``lengths`` float64 ``(N,)`` completion lengths or None.
    """

    rewards: np.ndarray
    scorable: np.ndarray
    num_generations: int
    roles: tuple[str, ...]
    group_roles: np.ndarray
    lengths: np.ndarray | None = None

    @property
    def num_groups(self) -> int:
        return self.rewards.size // self.num_generations


def combine_rewards(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor) -> torch.Tensor:
    """TRL's combination: ``(N, F)`` float32 rewards, ``(F,)`` weights -> ``(N,)`` float32, NaN where unscorable."""
    if rewards_per_func.ndim != 2:
        raise ValueError(f"rewards_per_func must have shape (N, num_reward_funcs), got {tuple(rewards_per_func.shape)}")
    weights = torch.as_tensor(reward_weights, dtype=rewards_per_func.dtype, device=rewards_per_func.device).reshape(-1)
    if weights.numel() != rewards_per_func.shape[1]:
        raise ValueError(f"reward_weights has {weights.numel()} entries for {rewards_per_func.shape[1]} reward functions")
    combined = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    return torch.where(torch.isnan(rewards_per_func).all(dim=1), torch.nan, combined)


def _group_roles(roles: Sequence[str] | None, num_rows: int, num_generations: int) -> tuple[tuple[str, ...], np.ndarray]:
    """Per-row role names -> (distinct roles, ``(N // G,)`` role index of each group); a group has one role."""
    num_groups = num_rows // num_generations
    if roles is None:
        return (DEFAULT_ROLE,), np.zeros(num_groups, dtype=np.int64)
    if len(roles) != num_rows:
        raise ValueError(f"roles has {len(roles)} entries for {num_rows} completions")
    names, first, codes = np.unique(np.asarray([str(r) for r in roles], dtype=object), return_index=True, return_inverse=True)
    per_row = codes.reshape(num_groups, num_generations)
    disagree = np.flatnonzero((per_row != per_row[:, :1]).any(axis=1))
    if disagree.size:
        g = int(disagree[0])
        mixed = sorted(str(n) for n in names[np.unique(per_row[g])])
        raise ValueError(f"group {g} (rows {g * num_generations}..{(g + 1) * num_generations - 1}) mixes roles {mixed}; a group has one role")
    order = np.argsort(first)  # roles in order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return tuple(str(n) for n in names[order]), rank[per_row[:, 0]].astype(np.int64)


def prepare_batch(
    rewards_per_func: torch.Tensor,
    reward_weights: torch.Tensor,
    num_generations: int,
    roles: Sequence[str] | None = None,
    lengths: torch.Tensor | np.ndarray | Sequence[int] | None = None,
) -> RewardBatch:
    """Validate and combine a gathered batch: ``(N, F)`` rewards -> :class:`RewardBatch`."""
    if isinstance(num_generations, bool) or not isinstance(num_generations, int) or num_generations < 1:
        raise ValueError(f"num_generations must be a positive int, got {num_generations!r}")
    combined = combine_rewards(torch.as_tensor(rewards_per_func), reward_weights)
    num_rows = combined.numel()
    if num_rows % num_generations:
        raise ValueError(f"{num_rows} completions do not split into groups of num_generations={num_generations}")
    rewards = combined.detach().to("cpu", torch.float64).numpy()
    scorable = ~np.isnan(rewards)
    if np.isinf(rewards).any():
        row = int(np.flatnonzero(np.isinf(rewards))[0])
        raise ValueError(f"completion {row} (group {row // num_generations}): combined reward is {rewards[row]}; rewards must be finite or None")
    length_array = None
    if lengths is not None:
        lengths = lengths.detach().cpu().numpy() if isinstance(lengths, torch.Tensor) else lengths
        length_array = np.asarray(lengths, dtype=np.float64).reshape(-1)
        if length_array.size != num_rows:
            raise ValueError(f"lengths has {length_array.size} entries for {num_rows} completions")
    role_names, group_roles = _group_roles(roles, num_rows, num_generations)
    return RewardBatch(rewards, scorable, num_generations, role_names, group_roles, length_array)


def _estimate_role(batch: RewardBatch, role: int, name: str, options: Mapping[str, Any]) -> tuple[np.ndarray | slice, np.ndarray]:
    """Run estimator ``name`` over the scorable rows of role ``role``'s groups: (rows, advantages of those rows)."""
    estimator = get_estimator(name)
    G = batch.num_generations  # noqa: N806 - the paper's name
    single_role = len(batch.roles) == 1
    if single_role and batch.scorable.all():  # the common case: every row, groups of G
        rows: np.ndarray | slice = slice(None)
        offsets = np.arange(0, batch.rewards.size + 1, G, dtype=np.int64)
    elif single_role:
        rows = np.flatnonzero(batch.scorable)
        offsets = np.concatenate([[0], np.cumsum(batch.scorable, dtype=np.int64)[G - 1 :: G]])
    else:
        in_group = batch.group_roles == role
        rows = np.flatnonzero(batch.scorable & np.repeat(in_group, G))
        offsets = offsets_from_sizes(np.count_nonzero(batch.scorable.reshape(-1, G), axis=1)[in_group])
    values = batch.rewards[rows]
    kwargs = dict(options)
    if batch.lengths is not None:
        kwargs.setdefault("lengths", batch.lengths[rows])
    who = f"estimator {name!r} ({estimator.provider}) for role {batch.roles[role]!r}"
    advantages = as_advantages(estimator.batched_form(values, offsets, **kwargs), who)
    if advantages.size != values.size:
        raise ValueError(f"{who} returned {advantages.size} advantages for {values.size} scorable completions")
    if not np.isfinite(advantages).all():
        row = int(np.arange(batch.rewards.size)[rows][np.flatnonzero(~np.isfinite(advantages))[0]])
        raise ValueError(f"{who} gave a non-finite advantage to completion {row} (group {row // batch.num_generations}); advantages must be finite")
    return rows, advantages


def compute_advantages(
    batch: RewardBatch,
    estimator: str = "grpo",
    *,
    estimator_map: Mapping[str, str] | None = None,
    norm_adv_by_std_in_grpo: bool = True,
    estimator_kwargs: Mapping[str, Any] | None = None,
) -> np.ndarray:
    """Advantages float64 ``(N,)`` of a :class:`RewardBatch`: 0 on unscorable rows.

    Each role uses ``estimator_map[role]``, else ``estimator``, called once on the batched form
    over the scorable rows of all its groups (``lengths`` passed when known, for ``opo``).
    Nothing is returned unless every role's estimator succeeded.
    """
    options = {**(estimator_kwargs or {}), "norm_adv_by_std_in_grpo": norm_adv_by_std_in_grpo}
    estimator_map = estimator_map or {}
    advantages = np.zeros(batch.rewards.size, dtype=np.float64)
    if batch.rewards.size == 0:
        return advantages
    for role, role_name in enumerate(batch.roles):
        rows, values = _estimate_role(batch, role, estimator_map.get(role_name, estimator), options)
        advantages[rows] = values
    return advantages


def _role_groups(batch: RewardBatch) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each role's scorable rewards and group offsets, the groups the estimator saw: ``{role: (values, offsets)}``."""
    counts = np.count_nonzero(batch.scorable.reshape(-1, batch.num_generations), axis=1)
    out = {}
    for r, name in enumerate(batch.roles):
        in_role = batch.group_roles == r
        rows = batch.scorable & np.repeat(in_role, batch.num_generations)
        out[name] = (batch.rewards[rows], offsets_from_sizes(counts[in_role]))
    return out


def compute_metrics(batch: RewardBatch, advantages: np.ndarray) -> dict[str, float]:
    """``reward/{role}/*``, ``advantage/{role}/*`` and ``batch/{role}/*`` (the core's keys) over the scorable rows."""
    row_roles = np.repeat(batch.group_roles, batch.num_generations)[batch.scorable]
    rewards, used = batch.rewards[batch.scorable], advantages[batch.scorable]
    metrics = compute_role_metrics({name: rewards[row_roles == r] for r, name in enumerate(batch.roles)}, "reward")
    metrics.update(compute_role_metrics({name: used[row_roles == r] for r, name in enumerate(batch.roles)}, "advantage", with_fraction_zero=True))
    metrics.update(batch_diagnostics(_role_groups(batch)))
    return metrics
