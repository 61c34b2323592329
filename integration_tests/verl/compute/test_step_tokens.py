"""Each turn's model tokens reach step-level estimators on verl's step path: ``turn_credit(center="tokens")`` equals the
collector's and the documented formula, re-stated here in plain Python, on turns with uneven token counts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
import rllm_verl.plugin  # noqa: F401 - installs the extensions, as verl's entry point does
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo import ray_trainer

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups

# per row: its uid and its turns as (model tokens, environment tokens after it, the turn's reward)
ROWS = [
    ("a", [(3, 2, 0.5), (1, 1, 0.0), (2, 0, 1.0)]),
    ("a", [(1, 1, 0.25), (4, 0, 0.0)]),
    ("b", [(2, 2, 1.0), (2, 1, -0.5), (1, 0, 0.5)]),
    ("b", [(5, 0, 0.75)]),
]
GAMMA, BETA = 0.9, 0.7


def verl_batch():
    width = max(sum(m + e for m, e, _ in turns) for _, turns in ROWS)
    mask = torch.zeros(len(ROWS), width, dtype=torch.int64)
    rewards = torch.zeros(len(ROWS), width, dtype=torch.float64)
    for row, (_, turns) in enumerate(ROWS):
        at = 0
        for model, env, reward in turns:
            mask[row, at : at + model] = 1
            rewards[row, at + model - 1] = reward
            at += model + env
    responses = torch.arange(len(ROWS) * width).reshape(len(ROWS), width)
    tensors = {"token_level_rewards": rewards, "response_mask": mask, "responses": responses}
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": np.array([u for u, _ in ROWS], dtype=object)})


def by_hand(center):
    """The documented formula (estimators/turn_credit.py), every turn scored by its reward."""
    out, levels = [], []
    for _, turns in ROWS:
        scores = [r for _, _, r in turns]
        deltas = [0.0] + [scores[t] - scores[t - 1] for t in range(1, len(scores))]
        levels.append(sum(r for _, _, r in turns) + sum(deltas))
        credit = []
        for t in range(len(turns)):
            total = 0.0
            for u in range(t, len(turns)):
                z = sum(GAMMA**k for k in range(u + 1))
                total += GAMMA ** (u - t) * deltas[u] / z
            credit.append(total)
        weights = [m for m, _, _ in turns] if center == "tokens" else [1] * len(turns)
        cbar = sum(w * c for w, c in zip(weights, credit, strict=True)) / sum(weights)
        out.append([c - cbar for c in credit])
    for uid in {u for u, _ in ROWS}:
        members = [i for i, (u, _) in enumerate(ROWS) if u == uid]
        mean = sum(levels[i] for i in members) / len(members)
        for i in members:
            out[i] = [levels[i] - mean + BETA * c for c in out[i]]
    return out


def collector(center):
    groups = {}
    for uid, turns in ROWS:
        steps = [Step(response_ids=[1] * m, reward=r) for m, _, r in turns]
        groups.setdefault(uid, []).append(Trajectory(steps=steps, reward=sum(r for _, _, r in turns)))
    config = AlgorithmConfig(estimator="turn_credit", estimator_kwargs={"gamma": GAMMA, "beta": BETA, "center": center})
    collect_reward_and_advantage_from_trajectory_groups([TrajectoryGroup(t, group_id=u) for u, t in groups.items()], config)
    return [[s.advantage for s in t.steps] for u in groups for t in groups[u]]


@pytest.mark.parametrize("center", ["tokens", "turns"])
def test_turn_credit_centres_by_each_turns_model_tokens_on_verls_step_path(center):
    options = {"gamma": GAMMA, "beta": BETA, "center": center}
    config = OmegaConf.create({"gamma": 1.0, "lam": 1.0, "norm_adv_by_std_in_grpo": True, "rllm_estimator_kwargs": options})
    out = ray_trainer.compute_advantage(verl_batch(), "rllm_turn_credit", config=config)
    advantages, mask = out.batch["advantages"].numpy(), out.batch["response_mask"].numpy()
    got = []
    for row, (_, turns) in enumerate(ROWS):
        at, per_turn = 0, []
        for model, env, _ in turns:
            span = advantages[row, at : at + model]
            np.testing.assert_allclose(span, span[0])  # one value over the turn's model tokens
            per_turn.append(float(span[0]))
            at += model + env
        got.append(per_turn)
        assert not advantages[row][mask[row] == 0].any()
    expected = by_hand(center)
    for row in range(len(ROWS)):
        np.testing.assert_allclose(got[row], expected[row], atol=1e-9)
    # the collector's order is by uid, as ROWS lists them
    for mine, theirs in zip(got, collector(center), strict=True):
        np.testing.assert_allclose(mine, theirs, atol=1e-9)
    if center == "tokens":  # a turn's token weight moves the centre: different numbers from centring by turns
        assert not np.allclose(np.concatenate(got), np.concatenate(by_hand("turns")))
