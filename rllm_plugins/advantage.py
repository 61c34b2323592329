"""``collect_reward_and_advantage_from_trajectory_groups``: one estimator call per role, broadcast, metrics.

Two phases: everything is computed and validated first, then written to the steps, so an
error leaves every ``step.advantage`` as it was.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .config import AlgorithmConfig
from .diagnostics import batch_diagnostics
from .options import check_estimator_kwargs
from .outputs import as_advantages, as_groups
from .registry import _prepare_adv_estimator_input, get_estimator
from .segments import GroupLayout
from .spec import call_with_accepted_kwargs, flatten_groups, normalize_name
from .types import Step, TrajectoryGroup

__all__ = ["collect_reward_and_advantage_from_trajectory_groups", "compute_role_metrics"]


def _warn(message: str, *args: object) -> None:
    """Log a warning on this module's logger (``logging`` is imported on first use: it is not needed to import us)."""
    import logging

    logging.getLogger(__name__).warning(message, *args)


ZERO_ADVANTAGE = 1e-8  # |a| below this counts towards advantage/<role>/fraction_zero


@dataclass
class _RoleBatch:
    """The RL-mode groups of one role, with their indices in the caller's list."""

    groups: list[TrajectoryGroup] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)
    rewards: list[np.ndarray] = field(default_factory=list)


def _where(role: str, index: int, group: TrajectoryGroup, traj: int | None = None) -> str:
    text = f"role {role!r}, group {index} (group_id {group.group_id!r})"
    return text if traj is None else f"{text}, trajectory {traj}"


def _trajectory_rewards(group: TrajectoryGroup, index: int, role: str) -> np.ndarray:
    rewards = np.empty(len(group.trajectories), dtype=np.float64)
    for t, traj in enumerate(group.trajectories):
        reward = traj.reward
        if reward is None:
            raise ValueError(f"{_where(role, index, group, t)}: trajectory reward is None; every trajectory needs a reward in broadcast mode")
        if not isinstance(reward, numbers.Real):  # bools count as 0/1, like numpy
            raise ValueError(f"{_where(role, index, group, t)}: trajectory reward must be a real number, got {type(reward).__name__} {reward!r}")
        if not math.isfinite(reward):
            raise ValueError(f"{_where(role, index, group, t)}: trajectory reward is {reward}; rewards must be finite")
        rewards[t] = reward
    return rewards


def _precomputed(group: TrajectoryGroup, index: int, role: str) -> tuple[list[tuple[Step, list[float]]], list[float], int]:
    """Per-token advantages of a precomputed group: (step, tokens) to write, flat values, mismatches."""
    writes: list[tuple[Step, list[float]]] = []
    flat: list[float] = []
    mismatches = 0
    for t, traj in enumerate(group.trajectories):
        for s, step in enumerate(traj.steps):
            n = len(step.response_ids)
            adv = step.advantage
            if adv is None:
                tokens = [0.0] * n
            elif isinstance(adv, numbers.Real) and not isinstance(adv, bool):
                tokens = [float(adv)] * n
            else:
                try:
                    if isinstance(adv, (str, bytes)):
                        raise TypeError(adv)
                    tokens = [float(a) for a in adv]
                except (TypeError, ValueError):
                    raise ValueError(
                        f"{_where(role, index, group, t)}, step {s}: precomputed advantage must be a number or a list of numbers, "
                        f"got {type(adv).__name__} {adv!r}"
                    ) from None
                if not all(math.isfinite(a) for a in tokens):
                    raise ValueError(f"{_where(role, index, group, t)}, step {s}: precomputed advantage is not finite")
                if len(tokens) != n:
                    mismatches += 1
                    _warn(
                        "%s, step %d: precomputed advantage has %d values for %d response tokens; kept as is",
                        _where(role, index, group, t),
                        s,
                        len(tokens),
                        n,
                    )
                    flat.extend(tokens)
                    continue
            if not all(math.isfinite(a) for a in tokens):
                raise ValueError(f"{_where(role, index, group, t)}, step {s}: precomputed advantage is not finite")
            writes.append((step, tokens))
            flat.extend(tokens)
    return writes, flat, mismatches


def _call_estimator(role: str, batch: _RoleBatch, config: AlgorithmConfig) -> list[np.ndarray]:
    """Run the role's estimator and check its output against the groups."""
    name = config.estimator_name(role)
    estimator = get_estimator(name)
    kwargs = _prepare_adv_estimator_input(batch.rewards, config, batch.groups)
    result = call_with_accepted_kwargs(estimator.list_form, **kwargs)
    who = f"estimator {name!r} ({estimator.provider}) for role {role!r}"
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ValueError(f"{who} must return (advantages_by_group, returns_by_group), got {type(result).__name__}")
    advantages_by_group = as_groups(result[0], who)
    if len(advantages_by_group) != len(batch.groups):
        raise ValueError(f"{who} returned advantages for {len(advantages_by_group)} groups, expected {len(batch.groups)}")
    checked = []
    for group, index, advantages in zip(batch.groups, batch.indices, advantages_by_group, strict=True):
        advantages = as_advantages(advantages, f"estimator {name!r} ({estimator.provider}) for {_where(role, index, group)}")
        if advantages.size != len(group.trajectories):
            raise ValueError(f"{who}: {_where(role, index, group)} got {advantages.size} advantages for {len(group.trajectories)} trajectories")
        if not np.isfinite(advantages).all():
            t = int(np.flatnonzero(~np.isfinite(advantages))[0])
            raise ValueError(f"{who}: {_where(role, index, group, t)} got advantage {advantages[t]}; advantages must be finite")
        checked.append(advantages)
    return checked


def compute_role_metrics(values_by_role: dict[str, Sequence[float]], prefix: str, with_fraction_zero: bool = False) -> dict[str, float]:
    """``{prefix}/{role}/{mean,std,max,min}`` (+ ``fraction_zero``) of each role's values."""
    metrics: dict[str, float] = {}
    for role, values in values_by_role.items():
        arr = np.asarray(values, dtype=np.float64)
        if arr.size == 0:
            continue
        whole = GroupLayout.from_offsets([0, arr.size], arr.size)  # overflow-safe mean and std (rewards up to ~1e300)
        mean = whole.mean(arr)
        metrics[f"{prefix}/{role}/mean"] = float(mean[0])
        metrics[f"{prefix}/{role}/std"] = float(whole.std(arr, mean)[0])
        metrics[f"{prefix}/{role}/max"] = float(arr.max())
        metrics[f"{prefix}/{role}/min"] = float(arr.min())
        if with_fraction_zero:
            metrics[f"{prefix}/{role}/fraction_zero"] = float(np.mean(np.abs(arr) < ZERO_ADVANTAGE))
    return metrics


def collect_reward_and_advantage_from_trajectory_groups(
    groups: list[TrajectoryGroup],
    algorithm_config: AlgorithmConfig,
    collect_advantage: bool = True,
) -> dict[str, float]:
    """Compute each role's advantages, broadcast them to every step, and return metrics.

    Groups are split by ``group_role``; each role's RL-mode groups go to one call of its
    estimator (``estimator_map[role]``, else ``estimator``), and every step of a trajectory
    gets the trajectory's advantage. With ``use_precomputed_advantage`` and some step of a
    group carrying an advantage, that group's per-token advantages are used instead (float ->
    repeated over ``response_ids``, missing -> zeros). ``collect_advantage=False`` only
    collects rewards. Metrics: ``reward/{role}/{mean,std,max,min}`` and
    ``advantage/{role}/{mean,std,max,min,fraction_zero}`` and the ``batch/{role}/...`` group
    diagnostics of :mod:`.diagnostics`; empty groups contribute nothing.
    """
    if algorithm_config.stepwise_advantage_mode != "broadcast":
        raise ValueError(f"only broadcast mode is supported, got stepwise_advantage_mode={algorithm_config.stepwise_advantage_mode!r}")
    if collect_advantage and algorithm_config.estimator_kwargs:  # every estimator the config selects gets them
        selected = [normalize_name(name) for name in (algorithm_config.estimator, *algorithm_config.estimator_map.values())]
        check_estimator_kwargs(
            selected, algorithm_config.estimator_kwargs, where="AlgorithmConfig.estimator_kwargs", norm_field="AlgorithmConfig.norm_adv_by_std_in_grpo"
        )

    rewards_by_role: dict[str, list[float]] = {}
    advantages_by_role: dict[str, list[float]] = {}
    role_batches: dict[str, _RoleBatch] = {}
    token_writes: list[tuple[Step, list[float]]] = []
    mismatches_by_role: dict[str, int] = {}

    for index, group in enumerate(groups):
        if not group.trajectories:
            continue
        role = group.group_role
        has_precomputed = any(step.advantage is not None for traj in group.trajectories for step in traj.steps)
        if has_precomputed and algorithm_config.use_precomputed_advantage:
            if collect_advantage:
                writes, flat, mismatches = _precomputed(group, index, role)
                token_writes.extend(writes)
                advantages_by_role.setdefault(role, []).extend(flat)
                if mismatches:
                    mismatches_by_role[role] = mismatches_by_role.get(role, 0) + mismatches
            continue
        if collect_advantage and has_precomputed:
            _warn(
                "%s: steps carry precomputed advantages but use_precomputed_advantage is False; overwriting them with %r",
                _where(role, index, group),
                algorithm_config.estimator_name(role),
            )
        rewards = _trajectory_rewards(group, index, role)
        rewards_by_role.setdefault(role, []).extend(rewards.tolist())
        if collect_advantage:
            batch = role_batches.setdefault(role, _RoleBatch())
            batch.groups.append(group)
            batch.indices.append(index)
            batch.rewards.append(rewards)

    broadcast_writes: list[tuple[TrajectoryGroup, np.ndarray]] = []
    for role, batch in role_batches.items():
        advantages_by_group = _call_estimator(role, batch, algorithm_config)
        for group, advantages in zip(batch.groups, advantages_by_group, strict=True):
            broadcast_writes.append((group, advantages))
            advantages_by_role.setdefault(role, []).extend(advantages.tolist())

    # every check passed: write
    for group, advantages in broadcast_writes:
        for traj, advantage in zip(group.trajectories, advantages.tolist(), strict=True):
            for step in traj.steps:
                step.advantage = advantage
    for step, tokens in token_writes:
        step.advantage = tokens

    metrics = compute_role_metrics(rewards_by_role, "reward")
    if collect_advantage:
        metrics.update(compute_role_metrics(advantages_by_role, "advantage", with_fraction_zero=True))
        for role, count in mismatches_by_role.items():
            metrics[f"advantage/{role}/precomputed_length_mismatches"] = float(count)
        metrics.update(batch_diagnostics({role: flatten_groups(batch.rewards) for role, batch in role_batches.items()}))
    return metrics
