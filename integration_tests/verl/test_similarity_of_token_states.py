"""``rllm_gigpo`` with ``anchor_similarity`` through verl's ``compute_advantage``: states from tokens compare as token sequences.

Before, the environment segment before a turn was compared as the bytes of its int64 ids: ``(1, 2, 3, 4)`` and
``(5, 6, 7, 8)``, which share no token, scored 0.875 (their many zero bytes match) and formed one anchor group.
"""

from __future__ import annotations

import statistics
from difflib import SequenceMatcher

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

ENV = [(1, 2, 3, 4), (5, 6, 7, 8), (1, 2, 3, 4), (1, 2, 3, 9)]  # the environment tokens before each row's second turn
TURN_REWARDS = [(0.0, 1.0), (0.5, 0.0), (1.0, 0.5), (0.0, 0.0)]
THRESHOLD = 0.75  # (1, 2, 3, 9) vs (1, 2, 3, 4): 2 * 3 / 8 = 0.75; (5, 6, 7, 8) vs (1, 2, 3, 4): 0 (as bytes: 0.875)
EPS = 1e-6


def batch() -> tuple[DataProto, list[list[int]]]:
    """Four rows of one uid: a model turn of 2 tokens, the environment segment, a second model turn of 2 tokens."""
    responses, mask, rewards, turn_positions = torch.zeros(4, 8, dtype=torch.int64), torch.zeros(4, 8), torch.zeros(4, 8), []
    for r, (env, (first, second)) in enumerate(zip(ENV, TURN_REWARDS, strict=True)):
        responses[r, :2] = 100
        responses[r, 2:6] = torch.tensor(env)
        responses[r, 6:8] = 101
        mask[r, :2], mask[r, 6:8] = 1, 1
        rewards[r, 1], rewards[r, 7] = first, second
        turn_positions.append([0, 6])
    uid = np.array(["task"] * 4, dtype=object)
    tensors = {"responses": responses, "response_mask": mask, "token_level_rewards": rewards}
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": uid}), turn_positions


def plain_clusters() -> list[int]:
    """verl-agent's rule over the second turns' states, in row order: join the first cluster whose first member is similar."""
    firsts: list[tuple[int, ...]] = []
    out = []
    for env in ENV:
        for c, first in enumerate(firsts):
            if SequenceMatcher(None, env, first).ratio() >= THRESHOLD:
                out.append(c)
                break
        else:
            firsts.append(env)
            out.append(len(firsts) - 1)
    return out


def plain_gigpo() -> list[tuple[float, float]]:
    """Episode GRPO of the outcomes plus each turn's return against its anchor group (turn 0: the prompt, shared by all)."""
    outcomes = [a + b for a, b in TURN_REWARDS]
    mean, sd = statistics.fmean(outcomes), statistics.pstdev(outcomes)
    episode = [(o - mean) / (sd + EPS) for o in outcomes]
    returns = [(a + b, b) for a, b in TURN_REWARDS]  # gamma 1
    groups: dict[object, list[float]] = {}
    keys = [("prompt", f"cluster {c}") for c in plain_clusters()]
    for r, (k0, k1) in enumerate(keys):
        groups.setdefault(k0, []).append(returns[r][0])
        groups.setdefault(k1, []).append(returns[r][1])

    def step(key: object, value: float) -> float:
        members = groups[key]
        return 0.0 if len(members) == 1 else (value - statistics.fmean(members)) / (statistics.pstdev(members) + EPS)

    return [(episode[r] + step(k0, returns[r][0]), episode[r] + step(k1, returns[r][1])) for r, (k0, k1) in enumerate(keys)]


def test_the_plain_clusters_keep_apart_states_that_share_no_token():
    assert plain_clusters() == [0, 1, 0, 0]


def test_similarity_anchors_in_verl_compare_token_sequences():
    data, positions = batch()
    options = {"anchor_similarity": THRESHOLD}
    config = OmegaConf.create({"adv_estimator": "rllm_gigpo", "gamma": 1.0, "norm_adv_by_std_in_grpo": True, "rllm_estimator_kwargs": options})
    advantages = compute_advantage(data, adv_estimator="rllm_gigpo", gamma=1.0, config=config).batch["advantages"]
    got = [(float(advantages[r, p0]), float(advantages[r, p1])) for r, (p0, p1) in enumerate(positions)]
    want = plain_gigpo()
    assert [a for pair in got for a in pair] == pytest.approx([a for pair in want for a in pair], rel=1e-5, abs=1e-6)
