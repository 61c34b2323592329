"""rLLM-style verl batches: ``DataProto`` rows <-> ``TrajectoryGroup`` s, joined back by row ids.

A row is one step (one model response). Rows sharing ``group_key`` (default ``uid``) form a
group; with ``trajectory_key`` the rows sharing it inside a group are the steps of one trajectory
(else every row is its own trajectory); ``role_key`` (default ``group_roles``, when present)
gives the group's role. :func:`dataproto_to_groups` tags each row with an id in
``non_tensor_batch["rllm_row_ids"]``; verl carries that column through ``reorder``,
``balance_batch``, ``select_idxs``, ``concat`` and padding, so :func:`apply_advantages` finds
every row's step again whatever happened to the row order (padding rows copy a real row's id).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rllm_plugins.types import Step, Trajectory, TrajectoryGroup

__all__ = ["ROW_ID_KEY", "apply_advantages", "dataproto_to_groups"]

ROW_ID_KEY = "rllm_row_ids"


def _column(data: Any, key: str, n: int) -> np.ndarray:
    if key not in data.non_tensor_batch:
        raise ValueError(f"DataProto has no non_tensor_batch[{key!r}]; present: {sorted(data.non_tensor_batch)}")
    column = np.asarray(data.non_tensor_batch[key])
    if len(column) != n:
        raise ValueError(f"non_tensor_batch[{key!r}] has {len(column)} entries for {n} rows")
    return column


def _has_tensor(data: Any, key: str) -> bool:
    return data.batch is not None and key in data.batch.keys()  # noqa: SIM118 - TensorDict has no `in`


def _tensor(data: Any, key: str) -> torch.Tensor:
    if not _has_tensor(data, key):
        raise ValueError(f"DataProto has no batch[{key!r}]")
    return data.batch[key]


def _row_ids(data: Any, n: int) -> np.ndarray:
    if ROW_ID_KEY not in data.non_tensor_batch:
        data.non_tensor_batch[ROW_ID_KEY] = np.arange(n, dtype=np.int64)
    ids = _column(data, ROW_ID_KEY, n)
    if len(set(ids.tolist())) != n:
        raise ValueError(f"non_tensor_batch[{ROW_ID_KEY!r}] repeats ids (a padded batch?); convert the batch before padding it")
    return ids


def _precomputed_value(value: Any) -> float | list[float] | None:
    if value is None:
        return None
    if np.ndim(value) == 0:
        return float(value)
    return [float(v) for v in np.asarray(value, dtype=np.float64).reshape(-1)]


def dataproto_to_groups(
    data: Any,
    *,
    group_key: str = "uid",
    trajectory_key: str | None = None,
    step_key: str | None = None,
    role_key: str = "group_roles",
    precomputed_key: str | None = None,
) -> list[TrajectoryGroup]:
    """Groups of trajectories of steps from a verl ``DataProto``; adds ``non_tensor_batch["rllm_row_ids"]``.

    Needs ``batch["token_level_rewards"]`` and ``batch["response_mask"]`` (B, T). A step's reward is
    its row's ``token_level_rewards.sum()``, a trajectory's reward the sum over its steps; a step's
    ``response_ids`` are the masked ``batch["responses"]`` tokens (token positions when absent).
    ``step_key`` orders the steps of a trajectory (else row order). ``precomputed_key`` names a
    non-tensor column of precomputed advantages (None, a float, or one value per response token).
    Groups and trajectories come in order of first appearance; ``group_id`` is ``"<uid>:<role>"``.
    """
    rewards = _tensor(data, "token_level_rewards")
    mask = _tensor(data, "response_mask")
    n = rewards.shape[0]
    if tuple(mask.shape) != tuple(rewards.shape):
        raise ValueError(f"response_mask has shape {tuple(mask.shape)}, token_level_rewards has {tuple(rewards.shape)}")
    uids = _column(data, group_key, n)
    roles = _column(data, role_key, n) if role_key in data.non_tensor_batch else None
    trajectory_ids = _column(data, trajectory_key, n) if trajectory_key is not None else None
    step_ids = _column(data, step_key, n) if step_key is not None else None
    precomputed = _column(data, precomputed_key, n) if precomputed_key is not None else None
    row_rewards = rewards.detach().to(device="cpu", dtype=torch.float64).sum(dim=-1).numpy()
    if not np.isfinite(row_rewards).all():
        row = int(np.flatnonzero(~np.isfinite(row_rewards))[0])
        raise ValueError(f"row {row} ({group_key} {uids[row]!r}) has reward {row_rewards[row]}; token_level_rewards must be finite")
    valid = mask.detach().to("cpu").numpy().astype(bool)
    tokens = _tensor(data, "responses").detach().to("cpu").numpy() if _has_tensor(data, "responses") else None
    row_ids = _row_ids(data, n)

    groups: dict[Any, tuple[TrajectoryGroup, dict[Any, Trajectory]]] = {}
    for row in range(n):
        uid = uids[row]
        role = None if roles is None else roles[row]
        entry = groups.get(uid)
        if entry is None:
            if role is not None and ":" in str(uid):
                raise ValueError(f"row {row}: {group_key} {uid!r} contains ':', which would be read as a role separator")
            group_id = str(uid) if role is None else f"{uid}:{role}"
            entry = groups[uid] = (TrajectoryGroup(trajectories=[], group_id=group_id), {})
        group, trajectories = entry
        if role is not None and group.group_role != str(role):
            raise ValueError(f"row {row}: {group_key} {uid!r} has rows of roles {group.group_role!r} and {role!r}; a group has one role")
        tid = row_ids[row] if trajectory_ids is None else trajectory_ids[row]
        trajectory = trajectories.get(tid)
        if trajectory is None:
            trajectory = trajectories[tid] = Trajectory(steps=[], reward=0.0, uid=str(tid))
            group.trajectories.append(trajectory)
        response = (tokens[row][valid[row]] if tokens is not None else np.flatnonzero(valid[row])).tolist()
        step = Step(response_ids=response, reward=float(row_rewards[row]), metadata={"row_id": row_ids[row].item()})
        if precomputed is not None:
            step.advantage = _precomputed_value(precomputed[row])
        trajectory.steps.append(step)
        trajectory.reward = float(trajectory.reward or 0.0) + step.reward
    if step_ids is not None:
        row_of = {row_id: row for row, row_id in enumerate(row_ids.tolist())}
        for _, trajectories in groups.values():
            for trajectory in trajectories.values():
                trajectory.steps.sort(key=lambda step: step_ids[row_of[step.metadata["row_id"]]])  # type: ignore[index]
    return [group for group, _ in groups.values()]


def apply_advantages(data: Any, groups: Sequence[TrajectoryGroup]) -> None:
    """Write ``batch["advantages"]`` and ``batch["returns"]`` (B, T) from the steps' advantages, joined by row id.

    A float advantage is broadcast over the row's ``response_mask``; a per-token list fills the
    masked positions in order. Every row must find its step (rows may be reordered or padded copies).
    Everything is checked before anything is written.
    """
    mask = _tensor(data, "response_mask")
    n = mask.shape[0]
    if ROW_ID_KEY not in data.non_tensor_batch:
        raise ValueError(f"DataProto has no non_tensor_batch[{ROW_ID_KEY!r}]: build the groups with dataproto_to_groups(data) first")
    row_ids = _column(data, ROW_ID_KEY, n).tolist()
    by_id: dict[Any, float | list[float]] = {}
    for g, group in enumerate(groups):
        for t, trajectory in enumerate(group.trajectories):
            for s, step in enumerate(trajectory.steps):
                where = f"group {g} ({group.group_id!r}), trajectory {t}, step {s}"
                if not step.metadata or "row_id" not in step.metadata:
                    raise ValueError(f"{where}: the step has no metadata['row_id']; use groups made by dataproto_to_groups")
                if step.advantage is None:
                    raise ValueError(f"{where}: advantage is None; compute advantages first")
                by_id[step.metadata["row_id"]] = step.advantage
    valid = mask.detach().to("cpu").numpy().astype(bool)
    scalars = np.zeros(n, dtype=np.float64)
    per_token: list[tuple[int, list[float]]] = []
    for row, row_id in enumerate(row_ids):
        if row_id not in by_id:
            raise ValueError(f"row {row} (row id {row_id!r}) has no step in the groups")
        advantage = by_id[row_id]
        if isinstance(advantage, (list, tuple, np.ndarray)):
            count = int(valid[row].sum())
            if len(advantage) != count:
                raise ValueError(f"row {row} (row id {row_id!r}): {len(advantage)} per-token advantages for {count} response tokens")
            per_token.append((row, list(advantage)))
        else:
            scalars[row] = float(advantage)
    if not np.isfinite(scalars).all():
        row = int(np.flatnonzero(~np.isfinite(scalars))[0])
        raise ValueError(f"row {row}: advantage {scalars[row]} is not finite")
    dtype = data.batch["token_level_rewards"].dtype if _has_tensor(data, "token_level_rewards") else torch.float32
    out = torch.from_numpy(scalars).to(dtype=dtype).unsqueeze(-1) * mask.to("cpu")
    out = out.to(dtype=dtype)
    for row, values in per_token:
        out[row, torch.from_numpy(valid[row])] = torch.tensor(values, dtype=dtype)
    out = out.to(mask.device)
    data.batch["advantages"] = out
    data.batch["returns"] = out
