"""The functional step of the TRL adapter: gathered reward batch -> rLLM advantages (+ metrics).

TRL's ``GRPOTrainer`` gathers the rewards of every process into ``rewards_per_func`` of shape
``(N, F)`` (``N`` completions, prompt-major with ``G = num_generations`` contiguous rows per
prompt; ``F`` reward functions; NaN where a function returned None). This module combines them
exactly as TRL does and runs an rLLM estimator on the groups:

- combined reward ``r = nansum(rewards_per_func * weights, axis=1)`` in float32 (TRL's numbers);
- a row where every function returned None is *unscorable*: it is left out of its group's
  statistics and gets advantage 0;
- each role (``roles``, one name per row; ``"all_groups"`` without one) runs its estimator once
  on the float64 batched form over all of its groups; TRL's own advantage settings
  (``scale_rewards``) reach the estimators that name them as keyword parameters (``trl_grpo``);
- with ``aggregation="normalize_then_sum"`` (TRL's GDPO setting) each role runs its estimator on
  each reward function instead (a None leaves that function out of its group), sums the weighted
  advantages and whitens them over the role with TRL's sample std + 1e-4
  (:func:`rllm_plugins.aggregation.normalize_then_sum`); TRL ignores ``scale_rewards`` there, and so do we.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from rllm_plugins import AlgorithmConfig, Step, Trajectory, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.advantage import compute_role_metrics
from rllm_plugins.aggregation import check_aggregation, normalize_then_sum
from rllm_plugins.diagnostics import batch_diagnostics
from rllm_plugins.registry import get_estimator
from rllm_plugins.run import Call, Commit, Wording, run_outcome
from rllm_plugins.segments import offsets_from_sizes
from rllm_plugins.shaping.stage import Shapers
from rllm_plugins.spec import Estimator
from rllm_plugins.state.store import EstimatorState
from rllm_plugins.transforms.stage import Transforms
from rllm_plugins.types import TrajectoryGroup
from rllm_trl.config import check_no_per_role_loss, role_name

__all__ = [
    "DEFAULT_ROLE",
    "RewardBatch",
    "advantages_from_trajectory_groups",
    "combine_rewards",
    "compute_advantages",
    "compute_advantages_via_groups",
    "compute_metrics",
    "prepare_batch",
    "role_name",
    "to_trajectory_groups",
    "unique_names",
]

DEFAULT_ROLE = "all_groups"  # TrajectoryGroup.group_role of a group_id without a role
TRL_WHITEN_EPSILON = 1e-4  # TRL's constant in the batch whitening of normalize_then_sum


@dataclass(frozen=True)
class RewardBatch:
    """A gathered reward batch in the form the estimators take.

    ``rewards`` float64 ``(N,)`` combined rewards (NaN on unscorable rows), ``scorable`` bool
    ``(N,)``, ``num_generations`` rows per group, ``roles`` the distinct role names (first
    appearance first), ``group_roles`` int64 ``(N // G,)`` index into ``roles`` of each group,
    ``lengths`` float64 ``(N,)`` completion lengths or None; ``rewards_per_func`` float64 ``(N, F)``
    (NaN where a function returned None), ``reward_weights`` float64 ``(F,)`` and ``reward_names``
    (F distinct names, see :func:`unique_names`, or empty) for per-function aggregation and metrics;
    ``task_ids`` object ``(N,)`` each row's prompt as a stable task id (str), for stateful estimators, or None.
    """

    rewards: np.ndarray
    scorable: np.ndarray
    num_generations: int
    roles: tuple[str, ...]
    group_roles: np.ndarray
    lengths: np.ndarray | None = None
    rewards_per_func: np.ndarray | None = None
    reward_weights: np.ndarray | None = None
    reward_names: tuple[str, ...] = ()
    task_ids: np.ndarray | None = None

    @property
    def num_groups(self) -> int:
        return self.rewards.size // self.num_generations


def _weighted_nansum(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor) -> torch.Tensor:
    """TRL's weighted sum: ``(N, F)`` rewards, ``(F,)`` weights -> ``nansum(rewards * weights, dim=1)`` ``(N,)`` in the rewards' dtype."""
    if rewards_per_func.ndim != 2:
        raise ValueError(f"rewards_per_func must have shape (N, num_reward_funcs), got {tuple(rewards_per_func.shape)}")
    weights = torch.as_tensor(reward_weights, dtype=rewards_per_func.dtype, device=rewards_per_func.device).reshape(-1)
    if weights.numel() != rewards_per_func.shape[1]:
        raise ValueError(f"reward_weights has {weights.numel()} entries for {rewards_per_func.shape[1]} reward functions")
    return (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)


def combine_rewards(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor) -> torch.Tensor:
    """TRL's combination: ``(N, F)`` float32 rewards, ``(F,)`` weights -> ``(N,)`` float32, NaN where unscorable."""
    combined = _weighted_nansum(rewards_per_func, reward_weights)
    return torch.where(torch.isnan(rewards_per_func).all(dim=1), torch.nan, combined)


def _float64(tensor: torch.Tensor, order: str = "K") -> np.ndarray:
    """``tensor`` as a float64 numpy array on the CPU in ``order`` (exact): float32 and float64 converted by numpy, other dtypes by torch."""
    tensor = tensor.detach().cpu()
    if tensor.dtype not in (torch.float32, torch.float64):
        tensor = tensor.to(torch.float64)
    return tensor.numpy().astype(np.float64, order=order, copy=False)


def _group_roles(roles: Sequence[str] | None, num_rows: int, num_generations: int) -> tuple[tuple[str, ...], np.ndarray]:
    """Per-row role names -> (distinct roles, ``(N // G,)`` role index of each group); a group has one role."""
    num_groups = num_rows // num_generations
    if roles is None:
        return (DEFAULT_ROLE,), np.zeros(num_groups, dtype=np.int64)
    if len(roles) != num_rows:
        raise ValueError(f"roles has {len(roles)} entries for {num_rows} completions")
    missing = [row for row, r in enumerate(roles) if r is None or (isinstance(r, float) and math.isnan(r))]
    if missing:
        role_name(roles[missing[0]], f"completion {missing[0]} (group {missing[0] // num_generations})")
    names, first, codes = np.unique(np.asarray([str(r) for r in roles], dtype=object), return_index=True, return_inverse=True)
    for name, row in zip(names.tolist(), first.tolist(), strict=True):
        role_name(name, f"completion {row} (group {row // num_generations})")
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
    reward_names: Sequence[str] | None = None,
    task_ids: Sequence[str] | None = None,
) -> RewardBatch:
    """Validate and combine a gathered batch: ``(N, F)`` rewards -> :class:`RewardBatch`."""
    if isinstance(num_generations, bool) or not isinstance(num_generations, int) or num_generations < 1:
        raise ValueError(f"num_generations must be a positive int, got {num_generations!r}")
    rewards_per_func = torch.as_tensor(rewards_per_func)
    combined = _weighted_nansum(rewards_per_func, reward_weights)  # TRL's numbers; the unscorable rows are marked in numpy
    num_rows = combined.numel()
    if num_rows % num_generations:
        raise ValueError(f"{num_rows} completions do not split into groups of num_generations={num_generations}")
    per_func = _float64(rewards_per_func, order="F")  # columns contiguous
    rewards = _float64(combined)
    rewards[np.isnan(per_func).all(axis=1)] = np.nan  # every function returned None: what combine_rewards gives
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
    names = unique_names(reward_names) if reward_names is not None else ()
    if names and len(names) != rewards_per_func.shape[1]:
        raise ValueError(f"reward_names has {len(names)} names for {rewards_per_func.shape[1]} reward functions")
    weights = _float64(torch.as_tensor(reward_weights)).reshape(-1)
    ids = None if task_ids is None else np.array(list(task_ids), dtype=object)
    if ids is not None and ids.shape != (num_rows,):
        raise ValueError(f"task_ids has {len(ids)} entries for {num_rows} completions")
    return RewardBatch(rewards, scorable, num_generations, role_names, group_roles, length_array, per_func, weights, names, ids)


def unique_names(names: Sequence[Any]) -> tuple[str, ...]:
    """Reward function names as distinct metric names: a name seen before gets its function index, ``"f"``, ``"f_1"``.

    TRL names a function by its ``__name__`` (``functools.partial``: the wrapped function's), so two
    partials of one function, or two lambdas, share a name; their metrics must not overwrite each other.
    """
    out: list[str] = []
    for f, name in enumerate(str(n) for n in names):
        unique = name
        while unique in out:
            unique = f"{unique}_{f}"
        out.append(unique)
    return tuple(out)


def _estimate_role(
    batch: RewardBatch,
    role: int,
    name: str,
    estimator: Estimator,
    options: Mapping[str, Any],
    trl_settings: Mapping[str, Any],
    state: EstimatorState | None = None,
    commits: list[Commit] | None = None,
    transforms: Transforms | None = None,
    shapers: Shapers | None = None,
) -> tuple[np.ndarray | slice, np.ndarray]:
    """Run estimator ``name`` over the scorable rows of role ``role``'s groups: (rows, advantages of those rows).

    A stateful estimator starts from ``state`` (nothing when None) and puts its commit into ``commits``; ``shapers``
    (their context one value per completion of the batch) shape those rows' rewards first, ``transforms`` run on those
    rows after (``lengths`` the completions').
    """
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
    values = batch.rewards.copy() if isinstance(rows, slice) else batch.rewards[rows]  # the estimator's own: logged rewards stay as they are
    call = Call(estimator, options, f"estimator {name!r} ({estimator.provider}) for role {batch.roles[role]!r}")
    lengths = None
    if call.needs.lengths and batch.lengths is not None:
        lengths = batch.lengths.copy() if isinstance(rows, slice) else batch.lengths[rows]

    def not_finite(advantages: np.ndarray, _: str) -> str:
        row = int(np.arange(batch.rewards.size)[rows][np.flatnonzero(~np.isfinite(advantages))[0]])
        return f"{call.who} gave a non-finite advantage to completion {row} (group {row // G}); advantages must be finite"

    advantages, commit = run_outcome(
        call,
        values,
        offsets,
        wording=Wording("scorable completions", not_finite),
        role=batch.roles[role],
        state=state,
        lengths=lengths,
        task_ids=None if batch.task_ids is None else batch.task_ids[rows],
        settings=trl_settings,
        transforms=None if transforms is None else replace(transforms, context={"lengths": None if batch.lengths is None else batch.lengths[rows]}),
        shapers=None if shapers is None else replace(shapers, context={k: None if v is None else v[rows] for k, v in shapers.context.items()}),
    )
    if commits is not None:
        commits.append(commit)
    return rows, advantages


def _normalize_then_sum_role(
    batch: RewardBatch, role: int, name: str, estimator: Estimator, options: Mapping[str, Any], transforms: Transforms | None = None
) -> tuple[np.ndarray | slice, np.ndarray]:
    """GDPO over role ``role``'s groups with estimator ``name``: (rows, advantages of those rows, 0 where unscorable);
    ``transforms`` run on the scorable ones."""
    if batch.rewards_per_func is None:
        raise ValueError("normalize_then_sum needs the per-function rewards: build the batch with prepare_batch")
    if estimator.spec.stateful:
        raise ValueError(
            f"estimator {name!r} ({estimator.provider}) is stateful (a running baseline over the combined reward); "
            "multi_objective_aggregation='normalize_then_sum' is not supported with it: use 'sum_then_normalize'"
        )
    G = batch.num_generations  # noqa: N806 - the paper's name
    rows: np.ndarray | slice = slice(None) if len(batch.roles) == 1 else np.flatnonzero(np.repeat(batch.group_roles == role, G))
    per_func = np.array(batch.rewards_per_func[rows], order="F")  # a copy: an estimator editing its input leaves the logged rewards alone
    where = f"estimator {name!r} ({estimator.provider}) for role {batch.roles[role]!r}"
    call = Call(estimator, options, where)
    lengths = batch.lengths[rows] if call.needs.lengths and batch.lengths is not None else None

    def combine(form: Any, values: np.ndarray, offsets: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        names = batch.reward_names or None
        return normalize_then_sum(values, offsets, form, weights=batch.reward_weights, whiten_epsilon=TRL_WHITEN_EPSILON, names=names, where=where, **kwargs)

    wording = Wording("completions", lambda values, _: f"{where} gave the non-finite advantage {values[~np.isfinite(values)][0]}; advantages must be finite")
    offsets = np.arange(0, per_func.shape[0] + 1, G, dtype=np.int64)
    if transforms is not None:  # the combined rewards of the scorable rows (the estimator saw each function's)
        context = {"rewards": batch.rewards[rows], "scores": batch.rewards[rows], "lengths": None if batch.lengths is None else batch.lengths[rows]}
        transforms = replace(transforms, context=context, parts=[(batch.roles[role], None, batch.scorable[rows])])
    advantages, _ = run_outcome(call, per_func, offsets, wording=wording, role=batch.roles[role], lengths=lengths, combine=combine, transforms=transforms)
    return rows, advantages


def compute_advantages(
    batch: RewardBatch,
    estimator: str = "grpo",
    *,
    estimator_map: Mapping[str, str] | None = None,
    norm_adv_by_std_in_grpo: bool = True,
    estimator_kwargs: Mapping[str, Any] | None = None,
    trl_settings: Mapping[str, Any] | None = None,
    aggregation: str = "sum_then_normalize",
    state: EstimatorState | None = None,
    transforms: Transforms | None = None,
    selected: Mapping[str, Estimator] | None = None,
    shapers: Shapers | None = None,
) -> np.ndarray:
    """Advantages float64 ``(N,)`` of a :class:`RewardBatch`: 0 on unscorable rows.

    Each role uses ``estimator_map[role]``, else ``estimator``, called once on the batched form
    over the scorable rows of all its groups (``lengths`` passed when known, for ``opo``); with
    ``aggregation="normalize_then_sum"`` once per reward function, then summed and whitened.
    ``trl_settings`` (e.g. ``{"scale_rewards": "batch"}``) go only to the estimators that name
    them as keyword parameters, and only when summing first. Nothing is returned unless every
    role's estimator succeeded. Stateful estimators (``rae``) continue ``state`` (one per estimator
    and role), updated only when every role succeeded; with ``state=None`` they start from nothing.
    ``transforms`` (``RLLMGRPOConfig.advantage_transforms``' sequence part) run in each role's run on its
    scorable rows, grouped by prompt; their metrics go into ``transforms.metrics``. ``shapers``
    (``RLLMGRPOConfig.reward_shapers``, their context one value per row) shape each role's scorable rewards before its
    estimator (not with ``normalize_then_sum``); their metrics go into ``shapers.metrics``. ``selected``: the names already
    resolved (the trainer's settings, resolved once); a name not in it is looked up.
    """
    gdpo = check_aggregation(aggregation) == "normalize_then_sum"
    options = {**(estimator_kwargs or {}), "norm_adv_by_std_in_grpo": norm_adv_by_std_in_grpo}
    trl_settings = trl_settings or {}
    both = sorted(set(trl_settings) & set(options))
    if both:
        raise ValueError(f"{both} given both as estimator keyword arguments and as TRL settings; give each once")
    estimator_map = estimator_map or {}
    advantages = np.zeros(batch.rewards.size, dtype=np.float64)
    if batch.rewards.size == 0:
        return advantages
    commits: list[Commit] = []
    for role, label in enumerate(batch.roles):
        name = estimator_map.get(label, estimator)
        resolved = selected[name] if selected is not None and name in selected else get_estimator(name)
        if gdpo:
            if shapers is not None and shapers.selected:
                raise ValueError(f"{shapers.where}: reward shapers add to one reward per completion; normalize_then_sum runs on each function's")
            rows, values = _normalize_then_sum_role(batch, role, name, resolved, options, transforms)
        else:
            rows, values = _estimate_role(batch, role, name, resolved, options, trl_settings, state, commits, transforms, shapers)
        advantages[rows] = values
    for commit in commits:  # every role succeeded
        commit()
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
    """``reward/{role}/*``, ``advantage/{role}/*`` and ``batch/{role}/*`` (the core's keys) over the scorable rows, and
    ``reward/{role}/{func}/{mean,std,max,min}`` over the rows where each named function gave a reward."""
    all_roles = np.repeat(batch.group_roles, batch.num_generations)
    row_roles = all_roles[batch.scorable]
    rewards, used = batch.rewards[batch.scorable], advantages[batch.scorable]
    metrics = compute_role_metrics({name: rewards[row_roles == r] for r, name in enumerate(batch.roles)}, "reward")
    if batch.reward_names and batch.rewards_per_func is not None:
        for f, func in enumerate(batch.reward_names):
            column = batch.rewards_per_func[:, f]
            given = ~np.isnan(column)
            metrics.update(compute_role_metrics({f"{name}/{func}": column[given & (all_roles == r)] for r, name in enumerate(batch.roles)}, "reward"))
    metrics.update(compute_role_metrics({name: used[row_roles == r] for r, name in enumerate(batch.roles)}, "advantage", with_fraction_zero=True))
    metrics.update(batch_diagnostics(_role_groups(batch)))
    return metrics


# ---------------------------------------------------------------- the object path: TrajectoryGroups and back
#
# A TRL reward batch as rLLM ``TrajectoryGroup``s and back: the object path.
#
# One group per prompt (``G`` contiguous completions), ``group_id = "<g>:<role>"`` (``"<g>"``
# without a role, so ``group_role == "all_groups"``), one trajectory per *scorable* completion
# with one step holding its prompt and completion ids; the row index is kept in
# ``trajectory.metadata["row"]``. Unscorable completions are left out (their advantage is 0).
# Use it when the object path is needed: ``estimator_map`` per role, precomputed advantages,
# custom grouping. It agrees with :func:`compute_advantages` to 1e-6 when the reward
# functions are summed first; ``normalize_then_sum`` is the fast path's alone (a ``ValueError`` here).


def to_trajectory_groups(batch: RewardBatch, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]]) -> list[TrajectoryGroup]:
    """``(N,)`` batch + per-row prompt/completion token ids -> one ``TrajectoryGroup`` per prompt."""
    num_rows = batch.rewards.size
    for name, ids in (("prompt_ids", prompt_ids), ("completion_ids", completion_ids)):
        if len(ids) != num_rows:
            raise ValueError(f"{name} has {len(ids)} rows for {num_rows} completions")
    groups = []
    for g, role in enumerate(batch.roles[r] for r in batch.group_roles.tolist()):
        trajectories = []
        for row in range(g * batch.num_generations, (g + 1) * batch.num_generations):
            if not batch.scorable[row]:
                continue
            reward = float(batch.rewards[row])
            step = Step(prompt_ids=list(prompt_ids[row]), response_ids=list(completion_ids[row]), reward=reward, done=True)
            trajectories.append(Trajectory(steps=[step], reward=reward, name=f"completion_{row}", metadata={"row": row}))
        groups.append(TrajectoryGroup(trajectories, group_id=str(g) if role == DEFAULT_ROLE else f"{g}:{role}"))
    return groups


def _scalar_advantage(step: Step, row: int) -> float:
    """A step's advantage as one number: a float, or a per-token list holding one value (0 when absent)."""
    advantage = step.advantage
    if advantage is None:
        return 0.0
    if isinstance(advantage, (int, float)):
        return float(advantage)
    values = {float(a) for a in advantage}
    if len(values) > 1:
        raise ValueError(f"completion {row}: per-token advantages differ across tokens; GRPOTrainer takes one advantage per completion")
    return values.pop() if values else 0.0


def advantages_from_trajectory_groups(groups: Sequence[TrajectoryGroup], num_rows: int) -> np.ndarray:
    """Advantages float64 ``(num_rows,)`` from groups made by :func:`to_trajectory_groups` (0 for rows absent)."""
    advantages = np.zeros(num_rows, dtype=np.float64)
    seen = np.zeros(num_rows, dtype=bool)
    for group in groups:
        for traj in group.trajectories:
            row = (traj.metadata or {}).get("row")
            if not isinstance(row, int) or not 0 <= row < num_rows:
                raise ValueError(f"group {group.group_id!r}, trajectory {traj.name!r}: metadata['row'] must be a row index in [0, {num_rows}), got {row!r}")
            if seen[row]:
                raise ValueError(f"group {group.group_id!r}: row {row} appears twice")
            if len(traj.steps) != 1:
                raise ValueError(f"group {group.group_id!r}, row {row}: a completion is one step, got {len(traj.steps)}")
            value = _scalar_advantage(traj.steps[0], row)
            if not math.isfinite(value):
                raise ValueError(f"group {group.group_id!r}, row {row}: advantage is {value}")
            advantages[row], seen[row] = value, True
    return advantages


def compute_advantages_via_groups(
    batch: RewardBatch,
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    algorithm_config: AlgorithmConfig,
) -> tuple[np.ndarray, dict[str, float]]:
    """The object path end to end: groups, rLLM collection, advantages ``(N,)`` and the core's metrics.

    A per-role policy loss in ``algorithm_config.loss_fn_map`` raises ``ValueError`` (TRL has one loss), and so does
    ``multi_objective_aggregation="normalize_then_sum"``: each trajectory carries one combined reward, not each function's.
    """
    check_no_per_role_loss(algorithm_config)
    if algorithm_config.multi_objective_aggregation == "normalize_then_sum":
        raise ValueError(
            "compute_advantages_via_groups: multi_objective_aggregation='normalize_then_sum' needs each reward function's reward, "
            "but the trajectories carry one combined reward per completion (Trajectory.reward), so the result would be "
            "'sum_then_normalize' numbers; use rllm_trl.compute_advantages(batch, ..., aggregation='normalize_then_sum') "
            "(what RLLMGRPOTrainer runs), or multi_objective_aggregation='sum_then_normalize' here"
        )
    groups = to_trajectory_groups(batch, prompt_ids, completion_ids)
    metrics = collect_reward_and_advantage_from_trajectory_groups(groups, algorithm_config)
    return advantages_from_trajectory_groups(groups, batch.rewards.size), metrics
