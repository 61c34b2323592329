"""rLLM-style verl batches: ``DataProto`` rows <-> ``TrajectoryGroup`` s, joined back by row ids.

A row is one step (one model response). Rows sharing ``group_key`` (default ``uid``) form a
group; with ``trajectory_key`` the rows sharing it inside a group are the steps of one trajectory
(else every row is its own trajectory); ``role_key`` (default ``group_roles``, when present)
gives the group's role; without it every group has the one role ``all_groups`` (a ``uid`` is an
id, never a role carrier, whatever characters it holds). :func:`dataproto_to_groups` tags each
row with an id in ``non_tensor_batch["rllm_row_ids"]``; verl carries that column through
``reorder``, ``balance_batch``, ``select_idxs``, ``concat`` and padding, so
:func:`apply_advantages` finds every row's step again whatever happened to the row order
(padding rows copy a real row's id). Convert before padding: the copies that
``verl.protocol.pad_dataproto_to_divisor`` appends would otherwise join their groups, so a batch
whose last rows repeat its first rows is refused unless ``pad_size`` says how many rows are padding.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rllm_plugins.types import Step, Trajectory, TrajectoryGroup
from rllm_verl.compute.outcome import check_representable, output_dtype

__all__ = ["ROW_ID_KEY", "apply_advantages", "dataproto_to_groups", "group_id_of"]

ROW_ID_KEY = "rllm_row_ids"
_ROW_BITS = 22  # row ids are <random 40-bit base> * 2**22 + row: unique across conversions of batches below 4M rows


def group_id_of(uid: object, role: object | None) -> str:
    """``TrajectoryGroup.group_id`` of a uid and role: ``"<uid>"`` or ``"<uid>:<role>"``.

    ``%`` and ``:`` in the uid are percent-encoded (``"gsm8k:1"`` -> ``"gsm8k%3A1"``), so the
    group's role is ``role`` (``all_groups`` when None) and never a piece of the uid.
    """
    task = str(uid).replace("%", "%25").replace(":", "%3A")
    return task if role is None else f"{task}:{role}"


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


def _rows_equal(data: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(len(a),) bool: whether row ``a[i]`` equals row ``b[i]`` in every tensor and non-tensor column.

    Non-tensor columns (the ids) go first and each column only compares the pairs still equal, so
    the token tensors are read for a few rows at most (usually none).
    """
    same = np.ones(len(a), dtype=bool)
    for column in data.non_tensor_batch.values():
        rows = np.flatnonzero(same)
        if not rows.size:
            return same
        column = np.asarray(column)
        same[rows] = _column_equal(column[a[rows]], column[b[rows]])
    if data.batch is not None:
        for key in data.batch.keys():  # noqa: SIM118 - TensorDict
            rows = np.flatnonzero(same)
            if not rows.size:
                return same
            tensor = data.batch[key].detach()
            x, y = tensor[torch.from_numpy(a[rows])], tensor[torch.from_numpy(b[rows])]
            same[rows] = (x == y).reshape(rows.size, -1).all(dim=1).to("cpu").numpy()
    return same


def _column_equal(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Elementwise equality of two equal-length column slices (vectorised when numpy can, else one pair at a time)."""
    if x.ndim == 1:
        try:
            eq = x == y
            if isinstance(eq, np.ndarray) and eq.dtype == bool and eq.shape == x.shape:
                return eq
        except (TypeError, ValueError):  # elements that are arrays: compare them one by one
            pass
    return np.array([_equal(u, v) for u, v in zip(x, y, strict=True)], dtype=bool)


def _equal(x: Any, y: Any) -> bool:
    try:
        return bool(np.all(x == y)) and np.shape(x) == np.shape(y)
    except (TypeError, ValueError):
        return x is y


def _padding_copies(data: Any, n: int) -> int:
    """The largest ``k <= n // 2`` whose last ``k`` rows equal the first ``k`` in every column (0 if none).

    ``pad_dataproto_to_divisor`` appends copies of the first rows, so a padded batch has ``k >= 1``.
    """
    if n < 2:
        return 0
    last = np.full(n - 1, n - 1)
    candidates = np.flatnonzero(_rows_equal(data, np.arange(n - 1), last)) + 1  # k with row k-1 == row n-1
    for k in sorted((int(k) for k in candidates if k <= n // 2), reverse=True):
        if _rows_equal(data, np.arange(k), np.arange(n - k, n)).all():
            return k
    return 0


def _span(first: int, last: int) -> str:
    return f"row {first}" if first == last else f"rows {first}..{last}"


def _real_rows(data: Any, n: int, pad_size: int | None) -> int:
    """Number of leading real rows: ``n - pad_size``, after checking the padding rows copy real ones."""
    if pad_size is None:
        copies = _padding_copies(data, n) if ROW_ID_KEY not in data.non_tensor_batch else 0
        if copies:
            tail, head = _span(n - copies, n - 1), _span(0, copies - 1)
            raise ValueError(
                f"{tail} {'repeats' if copies == 1 else 'repeat'} {head} in every column, as verl.protocol.pad_dataproto_to_divisor "
                "pads a batch: padding copies would join their groups and change every advantage. Convert the batch "
                "(dataproto_to_groups) before padding it, or pass pad_size=<the pad_size verl returned> (pad_size=0 if "
                "these rows are real)"
            )
        return n
    if isinstance(pad_size, bool) or not isinstance(pad_size, (int, np.integer)) or not 0 <= pad_size < max(n, 1):
        raise ValueError(f"pad_size must be an int from 0 to {max(n - 1, 0)} (rows of padding at the end of the batch), got {pad_size!r}")
    real = n - int(pad_size)
    padding = np.arange(real, n)
    copied = _rows_equal(data, padding % real, padding) if pad_size else np.ones(0, dtype=bool)
    if not copied.all():
        row = int(padding[np.flatnonzero(~copied)[0]])
        raise ValueError(f"pad_size={pad_size}: row {row} should be verl's padding copy of row {row % real}, but the rows differ")
    return real


def _row_ids(data: Any, n: int, real: int) -> np.ndarray:
    """The row ids of the batch: new ones (padding rows get the id of the row they copy), else the column's."""
    if ROW_ID_KEY not in data.non_tensor_batch:  # a random base: ids of two conversions never meet
        data.non_tensor_batch[ROW_ID_KEY] = (secrets.randbits(40) << _ROW_BITS) + np.arange(n, dtype=np.int64) % max(real, 1)
    ids = _column(data, ROW_ID_KEY, n)
    if len(set(ids[:real].tolist())) != real:
        raise ValueError(
            f"non_tensor_batch[{ROW_ID_KEY!r}] repeats ids: the batch was padded, or concatenated with a copy of itself, after "
            "dataproto_to_groups tagged it; convert the unpadded batch"
        )
    return ids


def _check_ids(column: np.ndarray, key: str) -> None:
    """One hashable id per row: a 2-D column (tuples become rows of a 2-D array) or a list id is refused."""
    if column.ndim != 1:
        raise ValueError(
            f"non_tensor_batch[{key!r}] has shape {column.shape}; it needs one id per row (1-D). Join multi-part ids "
            "into one string, e.g. f'{task}|{sample}'"
        )
    for row, value in enumerate(column.tolist()):
        try:
            hash(value)
        except TypeError:
            raise ValueError(f"row {row}: {key} {value!r} is a {type(value).__name__}, not a hashable id (a str or an int)") from None
        if value != value:  # NaN: never equal to itself, so its rows would each be a group of one
            raise ValueError(f"row {row}: {key} is {value!r}, which equals no other id (NaN); give every row a real id")


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
    pad_size: int | None = None,
) -> list[TrajectoryGroup]:
    """Groups of trajectories of steps from a verl ``DataProto``; adds ``non_tensor_batch["rllm_row_ids"]``.

    Needs ``batch["token_level_rewards"]`` and ``batch["response_mask"]`` (B, T). A step's reward is
    its row's ``token_level_rewards.sum()``, a trajectory's reward the sum over its steps; a step's
    ``response_ids`` are the masked ``batch["responses"]`` tokens (token positions when absent).
    ``step_key`` orders the steps of a trajectory (else row order). ``precomputed_key`` names a
    non-tensor column of precomputed advantages (None, a float, or one value per response token).
    Groups and trajectories come in order of first appearance; ``group_id`` is :func:`group_id_of`
    (the role is ``all_groups`` without a ``role_key`` column). ``pad_size`` rows at the end are
    padding copies (``verl.protocol.pad_dataproto_to_divisor``'s second value): they join no group
    and get their source row's id; None checks that the batch does not look padded.
    """
    rewards = _tensor(data, "token_level_rewards")
    mask = _tensor(data, "response_mask")
    n = rewards.shape[0]
    if tuple(mask.shape) != tuple(rewards.shape):
        raise ValueError(f"response_mask has shape {tuple(mask.shape)}, token_level_rewards has {tuple(rewards.shape)}")
    uids = _column(data, group_key, n)
    _check_ids(uids, group_key)
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
    real = _real_rows(data, n, pad_size)
    row_ids = _row_ids(data, n, real)

    groups: dict[Any, tuple[TrajectoryGroup, dict[Any, Trajectory]]] = {}
    for row in range(real):
        uid = uids[row]
        role = None if roles is None else roles[row]
        entry = groups.get(uid)
        if entry is None:
            if role is not None and ":" in str(role):
                raise ValueError(f"row {row}: {role_key} {role!r} contains ':'; a role is read up to the next ':', so use another character")
            entry = groups[uid] = (TrajectoryGroup(trajectories=[], group_id=group_id_of(uid, role)), {})
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
        row_of = {row_id: row for row, row_id in enumerate(row_ids[:real].tolist())}
        for _, trajectories in groups.values():
            for trajectory in trajectories.values():
                trajectory.steps.sort(key=lambda step: step_ids[row_of[step.metadata["row_id"]]])  # type: ignore[index]
    return [group for group, _ in groups.values()]


def apply_advantages(data: Any, groups: Sequence[TrajectoryGroup]) -> None:
    """Write ``batch["advantages"]`` and ``batch["returns"]`` (B, T) from the steps' advantages, joined by row id.

    A float advantage is broadcast over the row's ``response_mask``; a per-token list fills the
    masked positions in order. Every row must find its step (rows may be reordered or padded copies).
    Advantages are written in the dtype of ``token_level_rewards`` (the default float dtype for integer
    rewards; float32 without them); one past that dtype's range is a ``ValueError`` naming the row.
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
                row_id = step.metadata["row_id"]
                if row_id in by_id:
                    raise ValueError(
                        f"{where}: row id {row_id!r} belongs to two steps of the groups (the groups of two conversions of "
                        "the same rows?); pass the groups of one dataproto_to_groups call"
                    )
                by_id[row_id] = step.advantage
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
            per_token.append((row, np.asarray(advantage, dtype=np.float64)))
        else:
            scalars[row] = float(advantage)
    if not np.isfinite(scalars).all():
        row = int(np.flatnonzero(~np.isfinite(scalars))[0])
        raise ValueError(f"row {row}: advantage {scalars[row]} is not finite")
    dtype = output_dtype(data.batch["token_level_rewards"]) if _has_tensor(data, "token_level_rewards") else torch.float32
    check_representable(scalars, dtype, "apply_advantages", row_ids, "row id")
    for row, values in per_token:
        if not np.isfinite(values).all():
            raise ValueError(f"row {row} (row id {row_ids[row]!r}): a per-token advantage is {values[~np.isfinite(values)][0]}; advantages must be finite")
        check_representable(values, dtype, f"apply_advantages: row {row}, per-token", np.full(values.size, row_ids[row], dtype=object), "row id")
    out = torch.from_numpy(scalars).to(dtype=dtype).unsqueeze(-1) * mask.to("cpu")
    out = out.to(dtype=dtype)
    for row, values in per_token:
        out[row, torch.from_numpy(valid[row])] = torch.from_numpy(values).to(dtype=dtype)
    out = out.to(mask.device)
    data.batch["advantages"] = out
    data.batch["returns"] = out
