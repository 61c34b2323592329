"""Fixtures of the verl integration tests: CPU DataProtos and reference advantages written from the formulas."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np
import pytest
import torch

RESPONSE_LENGTH = 7


def make_batch(rewards: Sequence[float], lengths: Sequence[int], uids: Sequence[object], response_length: int = RESPONSE_LENGTH):
    """A CPU DataProto: each row's reward on its last response token, ``response_mask`` = its first ``length`` tokens."""
    from verl import DataProto

    n = len(rewards)
    mask = torch.zeros(n, response_length, dtype=torch.int64)
    token_level_rewards = torch.zeros(n, response_length, dtype=torch.float32)
    for row, (reward, length) in enumerate(zip(rewards, lengths, strict=True)):
        mask[row, :length] = 1
        token_level_rewards[row, max(length - 1, 0)] = reward
    return DataProto.from_dict(
        tensors={"token_level_rewards": token_level_rewards, "response_mask": mask},
        non_tensors={"uid": np.array(list(uids), dtype=object)},
    )


def per_group(rewards: np.ndarray, uids: Sequence[object], fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Apply ``fn`` to each uid group's rewards (a Python loop, independent of the adapter) and scatter back."""
    rows: dict[object, list[int]] = defaultdict(list)
    for row, uid in enumerate(uids):
        rows[uid].append(row)
    out = np.empty(len(uids))
    for members in rows.values():
        out[members] = fn(np.asarray(rewards, dtype=np.float64)[members])
    return out


def grpo_reference(r: np.ndarray, eps: float = 1e-6, norm: bool = True, ddof: int = 0) -> np.ndarray:
    if r.size == 1:
        return r / (1.0 + eps) if norm else r.copy()
    centred = r - r.mean()
    return centred / (r.std(ddof=ddof) + eps) if norm else centred


def rloo_reference(r: np.ndarray) -> np.ndarray:
    if r.size == 1:
        return r.copy()
    return np.array([r[i] - np.delete(r, i).mean() for i in range(r.size)])


def make_session_batch(rng: np.random.Generator, response_length: int = RESPONSE_LENGTH):
    """A shuffled v1 multi-output batch and its keys ``{uid}_{session}_{index}``.

    2-4 prompts (uids containing ``_``), 1-5 sessions each, 1-3 outputs per session with increasing,
    gapped indices; every row (final or not) has its own random score spread over 1-3 of its
    tokens, and its own length. Returns ``(data, keys)``.
    """
    from verl import DataProto

    keys, uids, rows = [], [], []
    for p in range(int(rng.integers(2, 5))):
        uid = f"prompt_{p}"
        for session in range(int(rng.integers(1, 6))):
            indices = np.cumsum(rng.integers(1, 3, size=int(rng.integers(1, 4))))
            for index in indices:
                keys.append(f"{uid}_{session}_{index}")
                uids.append(uid)
                length = int(rng.integers(1, response_length + 1))
                row = np.zeros(response_length)
                row[rng.integers(0, length, size=int(rng.integers(1, 4)))] += rng.normal(size=1)[0]
                rows.append((row, length))
    order = rng.permutation(len(keys))
    mask = torch.zeros(len(keys), response_length, dtype=torch.int64)
    rewards = torch.zeros(len(keys), response_length, dtype=torch.float32)
    for out, src in enumerate(order):
        row, length = rows[src]
        rewards[out] = torch.from_numpy(row)
        mask[out, :length] = 1
    row_uids = np.array([uids[i] for i in order], dtype=object)
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors={"uid": row_uids})
    return data, [keys[i] for i in order]


def session_reference(keys, uids, token_level_rewards: torch.Tensor, mask: torch.Tensor, estimator, with_lengths: bool = False) -> np.ndarray:
    """Session-level advantages (B, T), by hand: per uid, one trajectory per session, reward = final output's reward.

    ``estimator(groups)`` (or ``estimator(groups, lengths)``) maps a list of per-uid reward arrays to
    a list of advantage arrays; a session's length is its response tokens over all its outputs.
    """
    rewards = token_level_rewards.to(torch.float64).numpy()
    final: dict[str, tuple[int, int]] = {}
    session_of_row = []
    lengths: dict[str, float] = defaultdict(float)
    for row, key in enumerate(keys):
        uid_part, session_id, index = key.rsplit("_", 2)
        session = f"{uid_part}_{session_id}"
        session_of_row.append(session)
        lengths[session] += float(mask[row].sum())
        if session not in final or final[session][0] < int(index):
            final[session] = (int(index), row)
    sessions_of_uid: dict[object, list[str]] = defaultdict(list)
    for session, (_, row) in final.items():
        sessions_of_uid[uids[row]].append(session)
    groups = [np.array([rewards[final[s][1]].sum() for s in sessions]) for sessions in sessions_of_uid.values()]
    group_lengths = [np.array([lengths[s] for s in sessions]) for sessions in sessions_of_uid.values()]
    advantages = estimator(groups, group_lengths) if with_lengths else estimator(groups)
    of_session = {s: a for sessions, adv in zip(sessions_of_uid.values(), advantages, strict=True) for s, a in zip(sessions, adv, strict=True)}
    return np.array([of_session[s] for s in session_of_row])[:, None] * mask.numpy()


def grpo_groups(groups: list[np.ndarray]) -> list[np.ndarray]:
    return [(r - r.mean()) / (r.std() + 1e-6) if r.size > 1 else r / (1 + 1e-6) for r in groups]


def rloo_groups(groups: list[np.ndarray]) -> list[np.ndarray]:
    return [np.array([r[i] - np.delete(r, i).mean() for i in range(r.size)]) if r.size > 1 else r for r in groups]


def reinforce_plus_plus_baseline_groups(groups: list[np.ndarray]) -> list[np.ndarray]:
    centred = [r - r.mean() if r.size > 1 else r for r in groups]
    flat = np.concatenate(centred)  # whitened over the role: re-centred, then divided by the std
    return [(c - flat.mean()) / (flat.std() + 1e-6) for c in centred]


def median_baseline_groups(groups: list[np.ndarray]) -> list[np.ndarray]:
    return [r - np.median(r) for r in groups]


SESSION_ESTIMATORS = {  # per-uid reward arrays -> advantage arrays, written from the formulas
    "rllm_grpo": grpo_groups,
    "rllm_rloo": rloo_groups,
    "rllm_reinforce_plus_plus_baseline": reinforce_plus_plus_baseline_groups,
    "rllm_median_baseline": median_baseline_groups,
}


def broadcast(advantages: np.ndarray, mask: torch.Tensor) -> np.ndarray:
    return advantages[:, None] * mask.numpy()


@pytest.fixture
def algorithm_config():
    """verl's ``algorithm`` section as the trainer passes it: a struct-mode DictConfig."""
    from omegaconf import OmegaConf

    def make(**extra):
        config = OmegaConf.create({"adv_estimator": "rllm_grpo", "norm_adv_by_std_in_grpo": True, "gamma": 1.0, "lam": 1.0, **extra})
        OmegaConf.set_struct(config, True)
        return config

    return make


@pytest.fixture
def ref():
    """The helpers above: ``make_batch``, ``per_group``, ``grpo``, ``rloo``, ``broadcast``, ``make_session_batch``, ``sessions``, ``session_estimators``."""
    from types import SimpleNamespace

    return SimpleNamespace(
        make_batch=make_batch,
        per_group=per_group,
        grpo=grpo_reference,
        rloo=rloo_reference,
        broadcast=broadcast,
        make_session_batch=make_session_batch,
        sessions=session_reference,
        session_estimators=SESSION_ESTIMATORS,
    )
