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
    """The helpers above: ``make_batch``, ``per_group``, ``grpo``, ``rloo``, ``broadcast``."""
    from types import SimpleNamespace

    return SimpleNamespace(make_batch=make_batch, per_group=per_group, grpo=grpo_reference, rloo=rloo_reference, broadcast=broadcast)
