"""verl's ``compute_advantage`` (legacy path): uids without model tokens (padding) are in no statistic of an ``rllm_*`` outcome estimator.

Padding rows (``response_mask`` all 0) with a uid of their own entered the role-level statistics of
REINFORCE++-baseline, PRPO, TRL's batch scaling and GPG's alpha, so the real rows' advantages moved.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

NAMES = ["rllm_reinforce_plus_plus_baseline", "rllm_prpo", "rllm_prpo_std_optional", "rllm_trl_grpo_batch", "rllm_gpg", "rllm_grpo", "rllm_rloo"]


def run(name: str, rewards: np.ndarray, mask: np.ndarray, uids: list[str], **options: object) -> np.ndarray:
    """Per-row advantage (the first token's) through verl's compute_advantage."""
    scores = torch.zeros(len(uids), 4)
    scores[:, -1] = torch.from_numpy(rewards.astype(np.float32))
    tensors = {"responses": torch.ones(len(uids), 4, dtype=torch.int64), "response_mask": torch.from_numpy(mask), "token_level_rewards": scores}
    data = DataProto.from_dict(tensors=tensors, non_tensors={"uid": np.array(uids, dtype=object)})
    config = OmegaConf.create({"adv_estimator": name, "gamma": 1.0, "norm_adv_by_std_in_grpo": True, "rllm_estimator_kwargs": dict(options)})
    advantages = compute_advantage(data, adv_estimator=name, gamma=1.0, config=config).batch["advantages"]
    return advantages.numpy().sum(axis=1) / np.maximum(mask.sum(axis=1), 1)


@pytest.mark.parametrize("name", NAMES)
def test_rows_without_model_tokens_change_no_real_row_and_get_zero(name):
    rewards = np.array([1.0, 0.0, 0.5, 0.0, 2.0, 1.0])
    uids = ["a", "a", "a", "b", "b", "b"]
    mask = np.ones((6, 4), dtype=np.float32)
    alone = run(name, rewards, mask, uids)
    padded_rewards = np.concatenate([rewards, [0.0, 3.0]])  # padding rows carry a reward too: it is no outcome
    padded_mask = np.concatenate([mask, np.zeros((2, 4), dtype=np.float32)])
    padded = run(name, padded_rewards, padded_mask, [*uids, "pad_0", "pad_1"])
    assert padded[:6] == pytest.approx(alone, rel=1e-6, abs=1e-7)
    assert padded[6:].tolist() == [0.0, 0.0]
    assert np.count_nonzero(alone) > 0
