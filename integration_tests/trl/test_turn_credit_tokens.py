"""``turn_credit(center="tokens")`` on TRL's turn path weighs each turn by its model tokens, as the collector does.

A scripted ``rollout_func`` returns episodes whose turns have uneven numbers of model tokens (``env_mask`` 1) between
environment tokens (``env_mask`` 0), with one ``turn_rewards`` entry per turn (the turns' scores). One real training
step; the per-turn advantages the trainer used are compared with the collector on the same trajectories (each
step's ``response_ids`` as long as its turn's model tokens) and with the documented formula written out below.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from datasets import Dataset
from rllm_trl import RLLMGRPOConfig, RLLMGRPOTrainer
from rllm_trl.turns import local_turns, row_turns, step_advantages

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.tiny import build_tiny_model

MODEL, ENV = 5, 6  # token ids of the model's and the environment's tokens

# per completion: (model tokens of each turn, each turn's score, the completion's reward); two groups of four
EPISODES = [
    ([1, 4, 2], [0.0, 0.5, 1.0], 1.0),
    ([3, 1], [0.2, 0.1], 0.0),
    ([2, 2, 1, 3], [0.0, 0.3, 0.3, 0.9], 0.5),
    ([5], [0.4], 0.0),
    ([1, 6], [0.0, 1.0], 1.0),
    ([2, 1, 1], [0.5, 0.0, 0.25], 0.0),
    ([4, 1], [0.1, 0.6], 1.0),
    ([1, 1, 5], [0.0, 0.0, 0.75], 0.0),
]
OPTIONS = {"gamma": 0.9, "beta": 1.5, "center": "tokens"}


def formula(tokens: list[list[int]], scores: list[list[float]], rewards: list[float], gamma: float, beta: float, center: str) -> list[list[float]]:
    """docs' turn_credit for one group, every turn scored: d_t = phi_t - phi_(t-1) (0 for the first turn), P_i = sum d,
    c_t = sum_(u >= t) gamma^(u-t) d_u / Z_u (Z_u = sum_(k<u) gamma^k), A_i = (R_i + P_i) - group mean,
    a_t = A_i + beta (c_t - cbar_i), cbar_i weighted by each turn's model tokens (center="tokens") or 1."""
    deltas = [[0.0] + [s[t] - s[t - 1] for t in range(1, len(s))] for s in scores]
    returns = [r + sum(d) for r, d in zip(rewards, deltas, strict=True)]
    mean = sum(returns) / len(returns)
    out = []
    for d, tok, ret in zip(deltas, tokens, returns, strict=True):
        n = len(d)
        credit = [sum(gamma ** (u - t) * d[u] / sum(gamma**k for k in range(u + 1)) for u in range(t, n)) for t in range(n)]
        weights = tok if center == "tokens" else [1] * n
        cbar = sum(c * w for c, w in zip(credit, weights, strict=True)) / sum(weights)
        out.append([ret - mean + beta * (c - cbar) for c in credit])
    return out


def collector(options: dict[str, Any]) -> list[list[float]]:
    """The core collector on the same trajectories: each step as many response ids as its turn has model tokens."""
    groups = []
    for g in range(0, len(EPISODES), 4):
        trajectories = [
            Trajectory(steps=[Step(response_ids=[MODEL] * k, reward=s) for k, s in zip(tokens, scores, strict=True)], reward=reward)
            for tokens, scores, reward in EPISODES[g : g + 4]
        ]
        groups.append(TrajectoryGroup(trajectories, group_id=f"task{g}:agent"))
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="turn_credit", estimator_kwargs=options))
    return [[step.advantage for step in traj.steps] for group in groups for traj in group.trajectories]


def expected(options: dict[str, Any]) -> list[list[float]]:
    out = []
    for g in range(0, len(EPISODES), 4):
        tokens, scores, rewards = zip(*EPISODES[g : g + 4], strict=True)
        out.extend(formula(list(tokens), list(scores), list(rewards), options["gamma"], options["beta"], options["center"]))
    return out


def completion(tokens: list[int]) -> tuple[list[int], list[int]]:
    """The completion's ids and env_mask: each turn's model tokens, one environment token between turns."""
    ids, mask = [], []
    for t, k in enumerate(tokens):
        if t:
            ids.append(ENV)
            mask.append(0)
        ids.extend([MODEL] * k)
        mask.extend([1] * k)
    return ids, mask


def rollout(prompts: list[str], trainer: Any) -> dict[str, Any]:
    out: dict[str, list[Any]] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [], "score": [], "turn_rewards": []}
    for b in range(len(prompts)):
        tokens, scores, reward = EPISODES[b % len(EPISODES)]
        ids, mask = completion(tokens)
        out["prompt_ids"].append([20 + b // 4])
        out["completion_ids"].append(ids)
        out["logprobs"].append([-1.0] * len(ids))
        out["env_mask"].append(mask)
        out["score"].append(reward)
        out["turn_rewards"].append(list(scores))
    return out


def score_reward(completions: list[Any], score: list[float], **_: Any) -> list[float]:
    return list(score)


def per_row(values: np.ndarray, offsets: np.ndarray) -> list[list[float]]:
    return [values[offsets[i] : offsets[i + 1]].tolist() for i in range(offsets.size - 1)]


def test_the_reference_numbers_differ_by_centre():
    """The collector and the formula agree, and centring by turns gives other numbers (so the tests below can tell)."""
    for center in ("tokens", "turns"):
        options = {**OPTIONS, "center": center}
        for got, want in zip(collector(options), expected(options), strict=True):
            assert got == pytest.approx(want, abs=1e-12)
    by_turns = expected({**OPTIONS, "center": "turns"})
    assert max(abs(a - b) for x, y in zip(expected(OPTIONS), by_turns, strict=True) for a, b in zip(x, y, strict=True)) > 0.01


def test_the_turn_functions_weigh_each_turn_by_its_model_tokens():
    built = [completion(tokens) for tokens, _, _ in EPISODES]
    width = max(len(ids) for ids, _ in built)
    ids = np.array([[*i, 0, *([0] * (width - len(i)))][:width] for i, _ in built])
    mask = np.array([[*m, *([0] * (width - len(m)))] for _, m in built])
    completion_mask = (np.arange(width) < np.array([len(i) for i, _ in built])[:, None]).astype(np.int64)
    turns = local_turns(completion_mask, mask)
    overrides = [{"turn_rewards": scores} for _, scores, _ in EPISODES]
    prompts = np.array([[20 + b // 4] for b in range(len(EPISODES))])
    rows = row_turns(ids, completion_mask, turns, overrides, with_anchors=False, prompt_ids=prompts, prompt_mask=np.ones_like(prompts))
    assert rows.step_tokens.tolist() == [k for tokens, _, _ in EPISODES for k in tokens]
    result = step_advantages(rows, np.array([reward for _, _, reward in EPISODES]), 4, "turn_credit", OPTIONS)
    got = per_row(result.values, result.offsets)
    for row, (g, c, e) in enumerate(zip(got, collector(OPTIONS), expected(OPTIONS), strict=True)):
        assert g == pytest.approx(c, abs=1e-12), f"completion {row}: not the collector's"
        assert g == pytest.approx(e, abs=1e-12), f"completion {row}: not the formula's"


def test_a_training_step_centres_turn_credit_by_tokens(tokenizer: Any, tmp_path: Path, make_config: Any):
    args = make_config(
        tmp_path,
        RLLMGRPOConfig,
        reward_weights=None,
        max_completion_length=24,
        max_steps=1,
        adv_estimator="turn_credit",
        adv_estimator_kwargs=OPTIONS,
    )
    trainer = RLLMGRPOTrainer(
        model=build_tiny_model(tokenizer, seed=0),
        reward_funcs=[score_reward],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["go", "run"] * 4}),
        processing_class=tokenizer,
        rollout_func=rollout,
    )
    trainer.train()
    result = trainer.last_step_advantages
    got = per_row(result.values, result.offsets)
    for row, (g, c, e) in enumerate(zip(got, collector(OPTIONS), expected(OPTIONS), strict=True)):
        assert g == pytest.approx(c, abs=1e-9), f"completion {row}: not the collector's"
        assert g == pytest.approx(e, abs=1e-9), f"completion {row}: not the formula's"
