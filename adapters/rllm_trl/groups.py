"""A TRL reward batch as rLLM ``TrajectoryGroup``s and back: the object path.

One group per prompt (``G`` contiguous completions), ``group_id = "<g>:<role>"`` (``"<g>"``
without a role, so ``group_role == "all_groups"``), one trajectory per *scorable* completion
with one step holding its prompt and completion ids; the row index is kept in
``trajectory.metadata["row"]``. Unscorable completions are left out (their advantage is 0).
Use it when the object path is needed: ``estimator_map`` per role, precomputed advantages,
custom grouping. It agrees with :func:`rllm_trl.outcome.compute_advantages` to 1e-6 when the reward
functions are summed first; ``normalize_then_sum`` is the fast path's alone (a ``ValueError`` here).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_trl.config import check_no_per_role_loss
from rllm_trl.outcome import DEFAULT_ROLE, RewardBatch

__all__ = ["advantages_from_trajectory_groups", "compute_advantages_via_groups", "to_trajectory_groups"]


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
