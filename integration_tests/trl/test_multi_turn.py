"""Step-level estimators on multi-turn completions: (B, T) advantages, against a plain computation written out here.

The toy environment: each turn the model emits one token; the environment answers with one token that
only depends on the action's parity (so different histories reach the same observation: aliased
states); an odd multiple of 3 ends the episode early (1 to 3 turns). The score is the share of even actions.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from datasets import Dataset
from rllm_trl import RLLMGRPOConfig, RLLMGRPOTrainer
from rllm_trl.turns import local_turns, row_turns, spread_local, step_advantages

from rllm_plugins.registry import available_estimators, get_estimator_spec
from rllm_plugins.tiny import build_tiny_model

MAX_TURNS = 3
EPS = 1e-6


# ---------------------------------------------------------------- the plain computation


def plain_turns(model_tokens: list[int]) -> list[tuple[int, int]]:
    """(start, end) of each run of 1s, by walking the row."""
    runs, start = [], None
    for t, m in enumerate([*model_tokens, 0]):
        if m and start is None:
            start = t
        if not m and start is not None:
            runs.append((start, t))
            start = None
    return runs


def plain_normalize(values: list[float]) -> list[float]:
    if len(values) == 1:
        return [0.0]
    mean = sum(values) / len(values)
    std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
    return [(v - mean) / (std + EPS) for v in values]


def plain_gigpo(
    ids: np.ndarray,
    mask: np.ndarray,
    rewards: list[float],
    group: int,
    gamma: float,
    w: float,
    turn_rewards: list[list[float] | None] | None = None,
    anchor_states: list[list[Hashable] | None] | None = None,
) -> tuple[np.ndarray, list[list[float]]]:
    """GiGPO's (B, T) advantages and per-row turn advantages, with loops: episode GRPO + w * anchor-group-normalised discounted returns."""
    B, T = mask.shape  # noqa: N806
    runs = [plain_turns([int(m) for m in mask[b]]) for b in range(B)]
    per_turn: list[list[float]] = []
    for g0 in range(0, B, group):
        rows = list(range(g0, g0 + group))
        episode = plain_normalize([rewards[b] for b in rows])
        returns, states, owner = [], [], []
        for b in rows:
            n = len(runs[b])
            steps = turn_rewards[b] if turn_rewards and turn_rewards[b] is not None else [0.0] * (n - 1) + [rewards[b]]
            back = [0.0] * n
            acc = 0.0
            for t in reversed(range(n)):
                acc = steps[t] + gamma * acc
                back[t] = acc
            for t in range(n):
                if anchor_states and anchor_states[b] is not None:
                    state = anchor_states[b][t]
                elif t == 0:
                    state = "prompt"
                else:
                    state = tuple(int(x) for x in ids[b, runs[b][t - 1][1] : runs[b][t][0]])
                returns.append(back[t])
                states.append(state)
                owner.append((b, t))
        step_adv = [0.0] * len(returns)
        for state in set(states):
            members = [k for k, s in enumerate(states) if s == state]
            for k, a in zip(members, plain_normalize([returns[k] for k in members]), strict=True):
                step_adv[k] = a
        by_row: dict[int, list[float]] = {b: [] for b in rows}
        for k, (b, _t) in enumerate(owner):
            by_row[b].append(episode[b - g0] + w * step_adv[k])
        per_turn.extend(by_row[b] for b in rows)
    out = np.zeros((B, T))
    for b in range(B):
        for (s, e), a in zip(runs[b], per_turn[b], strict=True):
            out[b, s:e] = a
    return out, per_turn


# ---------------------------------------------------------------- the functional path on random batches


def random_batch(rng: np.random.Generator, rows: int, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token ids from a small vocabulary (so environment segments repeat), completion masks with right padding, tool masks."""
    ids = rng.integers(0, 3, size=(rows, length))
    completion = np.zeros((rows, length), dtype=np.int64)
    tool = np.ones((rows, length), dtype=np.int64)
    for b in range(rows):
        n = int(rng.integers(1, length + 1))
        completion[b, :n] = 1
        t = 0
        while t < n:  # alternate model runs and environment runs; the first token is always the model's
            run = int(rng.integers(1, 4))
            t += run
            env = int(rng.integers(1, 3))
            tool[b, t : min(t + env, n)] = 0
            t += env
    return ids, completion, tool


def run_functional(ids: np.ndarray, completion: np.ndarray, tool: np.ndarray, rewards: np.ndarray, group: int, options: dict[str, Any], **overrides: Any):
    turns = local_turns(completion, tool)
    extras = [{k: v[b] for k, v in overrides.items() if v[b] is not None} for b in range(ids.shape[0])]
    prompts = np.full((ids.shape[0], 2), 7)  # one prompt for every row: turn 0 shares one anchor state per group
    rows = row_turns(ids, completion, turns, extras, with_anchors=True, prompt_ids=prompts, prompt_mask=np.ones_like(prompts))
    result = step_advantages(rows, rewards, group, "gigpo", options)
    return spread_local(result, rows, 0, turns), result


@pytest.mark.parametrize("seed", range(6))
def test_random_multi_turn_batches_match_the_plain_computation(seed):
    rng = np.random.default_rng(seed)
    ids, completion, tool = random_batch(rng, rows=12, length=int(rng.integers(4, 14)))
    rewards = rng.choice([0.0, 0.5, 1.0, 2.0], size=12)
    gamma, w = float(rng.choice([0.0, 0.5, 0.9, 1.0])), float(rng.choice([0.5, 1.0, 2.0]))
    got, _ = run_functional(ids, completion, tool, rewards, 4, {"gamma": gamma, "step_advantage_w": w})
    expected, _ = plain_gigpo(ids, completion * tool, rewards.tolist(), 4, gamma, w)
    assert got.dtype == np.float32 and got.shape == ids.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    assert (got[(completion * tool) == 0] == 0).all()  # environment tokens and padding get 0


def plain_turn_grpo(mask: np.ndarray, rewards: list[float], group: int, gamma: float, lam: float, ended: str) -> np.ndarray:
    """turn_grpo's (B, T) advantages with loops: episode GRPO + lam * the turn's return against its turn's population."""
    B, T = mask.shape  # noqa: N806
    runs = [plain_turns([int(m) for m in mask[b]]) for b in range(B)]
    out = np.zeros((B, T))
    for g0 in range(0, B, group):
        rows = list(range(g0, g0 + group))
        episode = plain_normalize([rewards[b] for b in rows])
        returns = {}
        for b in rows:
            n, acc, back = len(runs[b]), 0.0, []
            for t in reversed(range(n)):
                acc = (rewards[b] if t == n - 1 else 0.0) + gamma * acc  # the completion's reward on its last turn
                back.append(acc)
            returns[b] = back[::-1]
        for b in rows:
            for t, (s, e) in enumerate(runs[b]):
                population = [returns[q][t] if t < len(returns[q]) else 0.0 for q in rows if ended == "absorbing" or t < len(returns[q])]
                per_turn = plain_normalize(population)[[q for q in rows if ended == "absorbing" or t < len(returns[q])].index(b)]
                out[b, s:e] = episode[b - g0] + lam * per_turn
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ended", ["absorbing", "present"])
def test_turn_grpo_on_random_multi_turn_batches_matches_the_plain_computation(seed, ended):
    rng = np.random.default_rng(seed)
    ids, completion, tool = random_batch(rng, rows=12, length=int(rng.integers(4, 14)))
    rewards = rng.choice([0.0, 0.5, 1.0, 2.0], size=12)
    turns = local_turns(completion, tool)
    rows = row_turns(ids, completion, turns, [{} for _ in range(12)], with_anchors=False, prompt_ids=np.ones((12, 2)), prompt_mask=np.ones((12, 2)))
    result = step_advantages(rows, rewards, 4, "turn_grpo", {"gamma": 0.9, "lam": 0.5, "ended": ended})
    got = spread_local(result, rows, 0, turns)
    np.testing.assert_allclose(got, plain_turn_grpo(completion * tool, rewards.tolist(), 4, 0.9, 0.5, ended), rtol=0, atol=1e-5)


def plain_turn_grpo_to_go(mask: np.ndarray, rewards: list[float], group: int, gamma: float, lam: float) -> np.ndarray:
    """turn_grpo(value="reward_to_go", baseline="leave_one_out")'s (B, T) advantages with loops: each population centred on its
    other members' mean; a turn's part sums its own and every later turn index's of the task group (0 after the row's end)."""
    B, T = mask.shape  # noqa: N806
    runs = [plain_turns([int(m) for m in mask[b]]) for b in range(B)]
    out = np.zeros((B, T))

    def against_others(values: list[float], k: int) -> float:
        others = values[:k] + values[k + 1 :]
        mean = sum(values) / len(values)
        std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
        return (values[k] - sum(others) / len(others)) / (std + EPS)

    for g0 in range(0, B, group):
        rows = list(range(g0, g0 + group))
        horizon = max(len(runs[b]) for b in rows)
        turn_rewards = {b: [rewards[b] if t == len(runs[b]) - 1 else 0.0 for t in range(horizon)] for b in rows}  # 0 after its end too
        for k, b in enumerate(rows):
            episode = against_others([rewards[q] for q in rows], k)
            z = [against_others([turn_rewards[q][s] for q in rows], k) for s in range(horizon)]
            for t, (s0, e) in enumerate(runs[b]):
                out[b, s0:e] = episode + lam * sum(gamma ** (s - t) * z[s] for s in range(t, horizon))
    return out


@pytest.mark.parametrize("seed", range(3))
def test_turn_grpo_reward_to_go_with_leave_one_out_matches_the_plain_computation(seed):
    rng = np.random.default_rng(seed)
    ids, completion, tool = random_batch(rng, rows=12, length=int(rng.integers(4, 14)))
    rewards = rng.choice([0.0, 0.5, 1.0, 2.0], size=12)
    turns = local_turns(completion, tool)
    rows = row_turns(ids, completion, turns, [{} for _ in range(12)], with_anchors=False, prompt_ids=np.ones((12, 2)), prompt_mask=np.ones((12, 2)))
    options = {"gamma": 0.9, "lam": 0.5, "value": "reward_to_go", "baseline": "leave_one_out"}
    got = spread_local(step_advantages(rows, rewards, 4, "turn_grpo", options), rows, 0, turns)
    np.testing.assert_allclose(got, plain_turn_grpo_to_go(completion * tool, rewards.tolist(), 4, 0.9, 0.5), rtol=0, atol=1e-5)


def test_rows_of_one_turn_and_overrides_match_the_plain_computation():
    rng = np.random.default_rng(7)
    ids, completion, tool = random_batch(rng, rows=8, length=10)
    tool[:4] = 1  # the first group: rows of one turn
    rewards = np.array([1.0, 0.0, 0.5, 1.0, 2.0, 0.0, 1.0, 1.0])
    counts = [len(plain_turns([int(m) for m in (completion * tool)[b]])) for b in range(8)]
    turn_rewards = [None] * 4 + [list(rng.normal(size=counts[b]).round(2)) for b in range(4, 8)]
    anchor_states = [None] * 4 + [["s" if t % 2 else "x" for t in range(counts[b])] for b in range(4, 8)]
    got, _ = run_functional(ids, completion, tool, rewards, 4, {"gamma": 0.9}, turn_rewards=turn_rewards, anchor_states=anchor_states)
    expected, _ = plain_gigpo(ids, completion * tool, rewards.tolist(), 4, 0.9, 1.0, turn_rewards, anchor_states)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    assert np.abs(got[:4]).max() > 0


def test_wrong_number_of_turns_in_an_override_names_the_completion_and_the_fix():
    ids = np.array([[5, 6, 7, 8]] * 4)
    completion = np.ones((4, 4), dtype=np.int64)
    tool = np.array([[1, 0, 1, 1]] * 4)  # two turns per row
    with pytest.raises(ValueError, match=r"completion 2 of the gathered batch \(group 0\): turn_rewards has 3 rewards for 2 turns.*one reward per model turn"):
        run_functional(ids, completion, tool, np.ones(4), 4, {}, turn_rewards=[None, None, [0.0, 0.0, 1.0], None])
    with pytest.raises(ValueError, match=r"completion 1 of the gathered batch \(group 0\): anchor_states has 1 states for 2 turns"):
        run_functional(ids, completion, tool, np.ones(4), 4, {}, anchor_states=[None, ["a"], None, None])
    with pytest.raises(ValueError, match=r"completion 0 of the gathered batch \(group 0\), turn 1: anchor state list .* is unhashable"):
        run_functional(ids, completion, tool, np.ones(4), 4, {}, anchor_states=[["a", [1]], None, None, None])


def test_a_row_with_tokens_but_no_model_token_gets_0_and_stays_out_of_the_group():
    ids = np.array([[1, 2, 3], [1, 4, 3], [1, 2, 3], [5, 5, 5]])
    completion = np.ones((4, 3), dtype=np.int64)
    tool = np.array([[1, 0, 1], [1, 0, 1], [1, 0, 1], [0, 0, 0]])  # row 3: environment tokens only
    rewards = np.array([1.0, 0.0, 0.5, 9.0])  # row 3's reward would move every number if it counted
    got, result = run_functional(ids, completion, tool, rewards, 4, {"gamma": 0.5})
    assert (got[3] == 0).all() and not result.scored[3] and result.values[result.offsets[3] :].tolist() == [0.0]
    expected, _ = plain_gigpo(ids[:3], (completion * tool)[:3], rewards[:3].tolist(), 3, 0.5, 1.0)  # the group without row 3
    np.testing.assert_allclose(got[:3], expected, rtol=0, atol=1e-5)


def test_unscorable_and_fully_masked_rows():
    ids = np.array([[1, 2, 3, 0]] * 4)
    completion = np.array([[1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 1, 0]])  # row 2: TRL masked it (truncated)
    tool = np.array([[1, 0, 1, 1]] * 4)
    rewards = np.array([1.0, np.nan, 0.0, 0.5])  # row 1 unscorable: out of the statistics, advantage 0
    got, result = run_functional(ids, completion, tool, rewards, 4, {"gamma": 1.0})
    assert (got[1] == 0).all() and (got[2] == 0).all()
    kept = [0, 2, 3]
    masked = completion.copy()
    masked[2] = [1, 0, 0, 0]  # the masked row as one turn anchored at the prompt, to compute what the others see
    expected, _ = plain_gigpo(ids[kept], (masked * tool)[kept], rewards[kept].tolist(), 3, 1.0, 1.0)
    np.testing.assert_allclose(got[[0, 3]], expected[[0, 2]], rtol=0, atol=1e-5)
    assert list(np.diff(result.offsets)) == [2, 2, 1, 2]


def test_an_empty_batch_gives_empty_advantages():
    empty = np.zeros((0, 3), dtype=np.int64)
    got, result = run_functional(empty, empty, empty, np.zeros(0), 4, {})
    assert got.shape == (0, 3) and got.dtype == np.float32 and result.values.size == 0


# ---------------------------------------------------------------- real training steps on the toy environment


class ToyEnvironment:
    """Actions are tokens; the observation after an action is one of two tokens, by the action's parity (aliased states)."""

    def __init__(self, tokenizer: Any) -> None:
        self.observations = [tokenizer.convert_tokens_to_ids("a"), tokenizer.convert_tokens_to_ids("b")]
        assert tokenizer.unk_token_id not in self.observations

    def rollout(self, prompts: list[str], trainer: Any) -> dict[str, Any]:
        tokenizer, model = trainer.processing_class, trainer.model
        out: dict[str, list[Any]] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [], "score": []}
        for prompt in prompts:
            prompt_ids = tokenizer(prompt)["input_ids"]
            completion, logprobs, env_mask, actions = [], [], [], []
            for turn in range(MAX_TURNS):
                with torch.no_grad():
                    logits = model(torch.tensor([prompt_ids + completion])).logits[0, -1].float()
                logp = torch.log_softmax(logits, dim=-1)
                action = int(torch.multinomial(logp.exp(), 1))
                completion.append(action)
                logprobs.append(float(logp[action]))
                env_mask.append(1)
                actions.append(action)
                if turn == MAX_TURNS - 1 or action % 3 == 0:
                    break
                completion.append(self.observations[action % 2])
                logprobs.append(0.0)
                env_mask.append(0)
            out["prompt_ids"].append(prompt_ids)
            out["completion_ids"].append(completion)
            out["logprobs"].append(logprobs)
            out["env_mask"].append(env_mask)
            out["score"].append(sum(a % 2 == 0 for a in actions) / MAX_TURNS)
        return out


def score_reward(completions: list[Any], score: list[float], **_: Any) -> list[float]:
    return list(score)


class RecordingTrainer(RLLMGRPOTrainer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outputs: list[dict[str, Any]] = []

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        record = {k: output[k].detach().clone() for k in ("completion_ids", "completion_mask", "advantages") if k in output}
        if "tool_mask" in output:
            record["tool_mask"] = output["tool_mask"].detach().clone()
        record["rewards"] = self.last_reward_batch.rewards.copy()
        self.outputs.append(record)
        return output


@pytest.fixture
def multi_turn_trainer(tokenizer: Any, tmp_path: Path, make_config: Callable[..., Any]) -> Callable[..., RecordingTrainer]:
    def make(rollout: Callable[..., dict[str, Any]] | None = None, **overrides: Any) -> RecordingTrainer:
        args = make_config(tmp_path, RLLMGRPOConfig, **{"reward_weights": None, "max_completion_length": 2 * MAX_TURNS, **overrides})
        return RecordingTrainer(
            model=build_tiny_model(tokenizer, seed=0),
            reward_funcs=[score_reward],
            args=args,
            train_dataset=Dataset.from_dict({"prompt": ["go", "run", "the cat", "hello"] * 2}),
            processing_class=tokenizer,
            rollout_func=rollout or ToyEnvironment(tokenizer).rollout,
        )

    return make


@pytest.mark.parametrize("gamma, w", [(0.9, 1.0), (1.0, 0.5)])
def test_training_on_the_toy_environment_uses_per_turn_advantages(multi_turn_trainer, snapshot, gamma, w):
    trainer = multi_turn_trainer(adv_estimator="gigpo", adv_estimator_kwargs={"gamma": gamma, "step_advantage_w": w})
    before = snapshot(trainer.model)
    trainer.train()

    after = snapshot(trainer.model)
    assert any(not torch.equal(before[n], after[n]) for n in before), "no parameter changed"
    assert len(trainer.outputs) == 2
    saw_several_turns = saw_alias = False
    for record in trainer.outputs:
        ids, mask = record["completion_ids"].numpy(), (record["completion_mask"] * record["tool_mask"]).numpy()
        used = record["advantages"]
        assert used.shape == ids.shape and used.dtype == torch.float32
        expected, per_turn = plain_gigpo(ids, mask, record["rewards"].tolist(), 4, gamma, w)
        np.testing.assert_allclose(used.numpy(), expected, rtol=0, atol=1e-5)
        assert np.abs(expected).max() > 0
        saw_several_turns |= max(len(t) for t in per_turn) > 1
        observations = [tuple(ids[b, s - 1 : s]) for b in range(ids.shape[0]) for s, _ in plain_turns(list(mask[b]))[1:]]
        saw_alias |= len(observations) > len(set(observations))
    assert saw_several_turns and saw_alias, "the batches did not exercise multi-turn rows with aliased states"
    logged = [e for e in trainer.state.log_history if "loss" in e]
    assert "batch/all_groups/anchor_groups/mean_size" in logged[-1] and logged[-1]["batch/all_groups/turns/mean"] > 1
    last = trainer.outputs[-1]
    turn_values = np.concatenate(
        plain_gigpo(last["completion_ids"].numpy(), (last["completion_mask"] * last["tool_mask"]).numpy(), last["rewards"].tolist(), 4, gamma, w)[1]
    )
    assert logged[-1]["advantage/all_groups/mean"] == pytest.approx(float(turn_values.mean()), abs=1e-5)  # per turn


def test_rollout_turn_rewards_and_anchor_states_reach_the_estimator(multi_turn_trainer, tokenizer):
    env = ToyEnvironment(tokenizer)

    def rollout(prompts: list[str], trainer: Any) -> dict[str, Any]:
        out = env.rollout(prompts, trainer)
        out["turn_rewards"] = [[float(i % 3) * 0.5] * sum(m) for i, m in enumerate(out["env_mask"])]
        out["anchor_states"] = [[f"turn{t}" for t in range(sum(m))] for m in out["env_mask"]]
        return out

    trainer = multi_turn_trainer(rollout, adv_estimator="gigpo", adv_estimator_kwargs={"gamma": 0.9}, max_steps=1)
    trainer.train()
    record = trainer.outputs[0]
    ids, mask = record["completion_ids"].numpy(), (record["completion_mask"] * record["tool_mask"]).numpy()
    counts = [len(plain_turns(list(m))) for m in mask]
    turn_rewards = [[float(i % 3) * 0.5] * n for i, n in enumerate(counts)]
    anchors = [[f"turn{t}" for t in range(n)] for n in counts]
    expected, _ = plain_gigpo(ids, mask, record["rewards"].tolist(), 4, 0.9, 1.0, turn_rewards, anchors)
    np.testing.assert_allclose(record["advantages"].numpy(), expected, rtol=0, atol=1e-5)
    default, _ = plain_gigpo(ids, mask, record["rewards"].tolist(), 4, 0.9, 1.0)
    assert not np.allclose(expected, default), "the overrides made no difference; the test would not show they are used"


def test_a_rollout_override_with_the_wrong_number_of_turns_fails_the_step(multi_turn_trainer, tokenizer):
    env = ToyEnvironment(tokenizer)

    def rollout(prompts: list[str], trainer: Any) -> dict[str, Any]:
        out = env.rollout(prompts, trainer)
        out["turn_rewards"] = [[1.0] * (sum(m) + 1) for m in out["env_mask"]]
        return out

    trainer = multi_turn_trainer(rollout, adv_estimator="gigpo", max_steps=1)
    with pytest.raises(ValueError, match=r"completion 0 of the gathered batch \(group 0\): turn_rewards has \d rewards for \d turns"):
        trainer.train()


def test_outcome_estimators_keep_one_advantage_per_completion_on_multi_turn_rows(multi_turn_trainer, expected_advantages):
    trainer = multi_turn_trainer(adv_estimator="grpo", max_steps=1)
    trainer.train()
    record = trainer.outputs[0]
    assert record["advantages"].shape == (8,)
    rewards = torch.tensor(record["rewards"], dtype=torch.float32).reshape(-1, 1)
    np.testing.assert_allclose(record["advantages"].numpy(), expected_advantages(rewards, [1.0], 4, "grpo"), atol=1e-6)


@pytest.mark.parametrize("estimator, kwargs, factor", [("gigpo", {"step_advantage_w": 0.5}, 1.5), ("step_reinforce", {"gamma": 0.5}, 1.0)])
def test_single_turn_rows_get_one_advantage_each_and_a_note_once(make_trainer, caplog, expected_advantages, estimator, kwargs, factor):
    trainer = make_trainer(adv_estimator=estimator, adv_estimator_kwargs=kwargs)
    with caplog.at_level(logging.WARNING, logger="rllm_trl.trainer"):
        trainer.train()
    notes = [r for r in caplog.records if "carry no tool_mask" in r.getMessage()]
    assert len(notes) == 1
    for record in trainer.records:
        assert record["advantages"].shape == (8,)
        grpo = expected_advantages(record["rewards_per_func"], [1.0, 0.5], 4, "grpo")
        # one turn anchored at the prompt: gigpo's step part is the group's GRPO again ((1 + w) * grpo); step_reinforce is grpo
        np.testing.assert_allclose(record["advantages"].numpy(), factor * grpo, rtol=0, atol=1e-5)
        assert np.abs(grpo).max() > 0


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"multi_objective_aggregation": "normalize_then_sum"}, "step-level estimator: multi_objective_aggregation='normalize_then_sum'"),
        ({"adv_estimator_map": {"judge": "grpo"}, "role_column": "role"}, "drop adv_estimator_map"),
        ({"adv_estimator_kwargs": {"gamma": 1.5}}, r"gamma \(the discount of step returns\) must be a number in \[0, 1\]"),
        ({"adv_estimator_kwargs": {"lam": 0.5}}, "unknown option 'lam' for estimator 'gigpo'"),
    ],
)
def test_config_refuses_what_the_step_level_path_has_no_meaning_for(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        RLLMGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", adv_estimator="gigpo", **overrides)


def test_a_trainer_selects_turn_grpo_by_name_and_trains_on_its_advantages(multi_turn_trainer):
    trainer = multi_turn_trainer(adv_estimator="turn_grpo", adv_estimator_kwargs={"gamma": 0.9, "lam": 0.5}, max_steps=1)
    trainer.train()
    for record in trainer.outputs:
        mask = (record["completion_mask"] * record["tool_mask"]).numpy()
        expected = plain_turn_grpo(mask, record["rewards"].tolist(), 4, 0.9, 0.5, "absorbing")
        np.testing.assert_allclose(record["advantages"].numpy(), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "estimator, kwargs, message",
    [
        ("turn_grpo", {"ended": "absorb"}, r"ended must be one of \['absorbing', 'present'\]"),
        ("turn_grpo", {"single_turn": "combine"}, r"single_turn must be one of \['turns', 'combined'\]"),
        ("turn_grpo", {"value": "reward_to_go", "ended": "present"}, r"value='reward_to_go' sums .* needs ended='absorbing'"),
        ("turn_grpo", {"baseline": "loo"}, r"baseline must be one of \['mean', 'leave_one_out'\]"),
        ("step_reinforce", {"method": "mean_norm"}, r"method must be one of"),
        ("gigpo", {"anchor_similarity": 1.5}, r"anchor_similarity must be None"),
        ("composite", {"terms": [["grpo", 0.5], ["rlo", 0.5]]}, r"Unknown advantage estimator 'rlo'"),
    ],
)
def test_config_refuses_bad_options_of_the_new_step_level_estimators(tmp_path, estimator, kwargs, message):
    with pytest.raises(ValueError, match=message):
        RLLMGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", adv_estimator=estimator, adv_estimator_kwargs=kwargs)
    good = {"turn_grpo": {"ended": "present"}, "step_reinforce": {"method": "mean"}, "gigpo": {"anchor_similarity": 0.95}}
    good["composite"] = {"terms": [["grpo", 0.5], ["turn_grpo", 0.5]]}
    config = RLLMGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", adv_estimator=estimator, adv_estimator_kwargs=good[estimator])
    assert config.adv_estimator == estimator


def test_two_processes_hold_the_slices_of_one_per_turn_computation(tmp_path):
    """Groups straddle the ranks: every rank gathers the turns and anchor states of the other's rows."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    worker = Path(__file__).with_name("distributed_multi_turn_worker.py")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}", str(worker), str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"}, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{k}.json").read_text()) for k in (0, 1)]
    for step in range(2):
        parts = [ranks[k]["records"][step] for k in (0, 1)]
        assert parts[0]["rewards"] == parts[1]["rewards"] and len(parts[0]["rewards"]) == 12
        width = max(len(p["completion_ids"][0]) for p in parts)
        ids = np.zeros((12, width), dtype=np.int64)
        mask = np.zeros((12, width), dtype=np.int64)
        for k, part in enumerate(parts):
            n = len(part["completion_ids"][0])
            ids[6 * k : 6 * k + 6, :n] = part["completion_ids"]
            mask[6 * k : 6 * k + 6, :n] = part["model_tokens"]
        expected, per_turn = plain_gigpo(ids, mask, parts[0]["rewards"], 4, 0.9, 1.0)
        for k, part in enumerate(parts):
            used = np.asarray(part["advantages"])
            assert used.shape == (6, len(part["completion_ids"][0]))
            np.testing.assert_allclose(used, expected[6 * k : 6 * k + 6, : used.shape[1]], rtol=0, atol=1e-5)
        assert np.abs(expected[4:8]).max() > 0, "the straddling group carries no signal"
        assert max(len(turns) for turns in per_turn[4:8]) > 1, "the straddling group has no multi-turn row"


def test_per_turn_metrics_give_mean_advantage_and_reward_by_turn_index(multi_turn_trainer):
    trainer = multi_turn_trainer(adv_estimator="gigpo", adv_estimator_kwargs={"gamma": 0.5}, max_steps=1)
    trainer.train()
    record = trainer.outputs[0]
    ids, mask = record["completion_ids"].numpy(), (record["completion_mask"] * record["tool_mask"]).numpy()
    rewards = record["rewards"].tolist()
    _, per_turn = plain_gigpo(ids, mask, rewards, 4, 0.5, 1.0)
    by_turn: dict[str, list[tuple[float, float]]] = {}
    for b, turns in enumerate(per_turn):
        for t, advantage in enumerate(turns):
            step_reward = rewards[b] if t == len(turns) - 1 else 0.0  # the outcome on the last turn, 0 before
            by_turn.setdefault(str(t), []).append((advantage, step_reward))
        by_turn.setdefault("last", []).append((turns[-1], rewards[b]))
    logged = next(e for e in trainer.state.log_history if "loss" in e)
    assert {"turn/0/advantage_mean", "turn/last/advantage_mean", "turn/0/reward_mean", "turn/last/reward_mean"} <= set(logged)
    assert "turn/3/advantage_mean" not in logged  # turns 0, 1, 2 and the last
    for label, pairs in by_turn.items():
        assert logged[f"turn/{label}/advantage_mean"] == pytest.approx(sum(a for a, _ in pairs) / len(pairs), abs=1e-5)
        assert logged[f"turn/{label}/reward_mean"] == pytest.approx(sum(r for _, r in pairs) / len(pairs), abs=1e-6)
    assert len(by_turn) > 2, "the batch had no second turn"


def test_a_completion_without_model_tokens_gets_0_and_stays_out_of_every_metric(multi_turn_trainer, tokenizer):
    env = ToyEnvironment(tokenizer)
    observation = env.observations[0]

    def rollout(prompts: list[str], trainer: Any) -> dict[str, Any]:
        out = env.rollout(prompts, trainer)
        out["completion_ids"][1] = [observation, observation]  # the environment spoke, the model never acted
        out["logprobs"][1], out["env_mask"][1], out["score"][1] = [0.0, 0.0], [0, 0], 100.0
        return out

    trainer = multi_turn_trainer(rollout, adv_estimator="gigpo", adv_estimator_kwargs={"gamma": 0.9}, max_steps=1)
    trainer.train()
    record = trainer.outputs[0]
    assert (record["advantages"][1] == 0).all()
    ids, mask = record["completion_ids"].numpy(), (record["completion_mask"] * record["tool_mask"]).numpy()
    rewards = record["rewards"].tolist()
    assert np.isnan(rewards[1])  # out of the statistics, as an unscorable completion
    kept = [0, 2, 3, 4, 5, 6, 7]
    expected, _ = plain_gigpo(ids[[0, 2, 3]], mask[[0, 2, 3]], [rewards[b] for b in (0, 2, 3)], 3, 0.9, 1.0)
    np.testing.assert_allclose(record["advantages"].numpy()[[0, 2, 3]], expected, rtol=0, atol=1e-5)
    logged = next(e for e in trainer.state.log_history if "loss" in e)
    assert logged["reward/all_groups/max"] < 100.0 and logged["reward/all_groups/mean"] == pytest.approx(np.mean([rewards[b] for b in kept]), abs=1e-6)


def test_turn_0_is_anchored_at_each_completions_own_prompt(tokenizer, tmp_path, make_config):
    """A rollout_func returning initial states 20/21/20/21 in one group: turn 0 meets only the completions of its own prompt."""

    def rollout(prompts: list[str], trainer: Any) -> dict[str, Any]:
        count = len(prompts)
        return {
            "prompt_ids": [[20 + b % 2] for b in range(count)],
            "completion_ids": [[30 + b] for b in range(count)],
            "logprobs": [[0.0] for _ in range(count)],
            "score": [[1.0, 0.0, 0.0, None][b % 4] for b in range(count)],  # the fourth completion is unscorable
        }

    args = make_config(tmp_path, RLLMGRPOConfig, reward_weights=None, per_device_train_batch_size=4, max_steps=1, adv_estimator="gigpo")
    trainer = RecordingTrainer(
        model=build_tiny_model(tokenizer, seed=0),
        reward_funcs=[score_reward],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["go"] * 4}),
        processing_class=tokenizer,
        rollout_func=rollout,
    )
    trainer.train()
    # By hand: scorable rewards 1, 0, 0 (prompts 20, 21, 20). Episode part: mean 1/3, population std sqrt(2/9), so
    # (1 - 1/3) / sqrt(2/9) = sqrt(2). Step part, anchor group of prompt 20 = returns {1, 0}: (1 - 1/2) / (1/2) = 1.
    # Completion 0: sqrt(2) + 1 = 2.414 (one anchor for the whole group would give sqrt(2) + sqrt(2) = 2.828).
    episode = (1 - 1 / 3) / ((2 / 9) ** 0.5 + EPS)
    step = (1 - 1 / 2) / (1 / 2 + EPS)
    assert trainer.outputs[0]["advantages"][0].item() == pytest.approx(episode + step, abs=1e-5)
    assert trainer.outputs[0]["advantages"][0].item() == pytest.approx(2.414, abs=1e-3)
    # completion 1 (prompt 21) is alone in its anchor group: step part 0; completion 2 (prompt 20): -1
    assert trainer.outputs[0]["advantages"][1].item() == pytest.approx((0 - 1 / 3) / ((2 / 9) ** 0.5 + EPS), abs=1e-5)
    assert trainer.outputs[0]["advantages"][2].item() == pytest.approx((0 - 1 / 3) / ((2 / 9) ** 0.5 + EPS) - step, abs=1e-5)


@pytest.mark.parametrize("change, lengths", [(lambda m: m[:-1], "{n_minus_1} entries for {n}"), (lambda m: [*m, 1], "{n_plus_1} entries for {n}")])
def test_an_env_mask_shorter_or_longer_than_its_completion_names_the_row_and_lengths(multi_turn_trainer, tokenizer, change, lengths):
    env = ToyEnvironment(tokenizer)
    seen: dict[str, int] = {}

    def rollout(prompts: list[str], trainer: Any) -> dict[str, Any]:
        out = env.rollout(prompts, trainer)
        seen["n"] = len(out["completion_ids"][2])
        out["env_mask"][2] = change(out["env_mask"][2])
        return out

    trainer = multi_turn_trainer(rollout, adv_estimator="gigpo", max_steps=1)
    with pytest.raises(ValueError, match=r"completion 2 of this process's batch: env_mask has \d+ entries for \d+ completion_ids") as raised:
        trainer.train()
    n = seen["n"]
    assert lengths.format(n=n, n_minus_1=n - 1, n_plus_1=n + 1) in str(raised.value)
    assert "1 on the model's tokens, 0 on the environment's" in str(raised.value)


def speaking_first(env: ToyEnvironment, first: str) -> Callable[..., dict[str, Any]]:
    """The toy rollout, or (``first="environment"``) the same episodes opened by one environment token (env_mask 0, logprob 0.0)."""

    def rollout(prompts: list[str], trainer: Any) -> dict[str, Any]:
        out = env.rollout(prompts, trainer)
        if first == "environment":
            for key, opening in (("completion_ids", env.observations[0]), ("logprobs", 0.0), ("env_mask", 0)):
                out[key] = [[opening, *row] for row in out[key]]
        return out

    return rollout


@pytest.mark.parametrize("first", ["model", "environment"])
def test_an_env_mask_that_looks_inverted_is_warned_about_once(multi_turn_trainer, tokenizer, caplog, first):
    rollout = speaking_first(ToyEnvironment(tokenizer), first)

    def inverted(prompts: list[str], trainer: Any) -> dict[str, Any]:
        out = rollout(prompts, trainer)
        out["env_mask"] = [[1 - m for m in mask] for mask in out["env_mask"]]  # the mistake: 1 on the environment's tokens
        return out

    trainer = multi_turn_trainer(inverted, adv_estimator="gigpo", max_steps=2)
    with caplog.at_level(logging.WARNING, logger="rllm_trl.rollouts"):
        trainer.train()
    warnings = [r.getMessage() for r in caplog.records if "env_mask looks inverted" in r.getMessage()]
    assert len(warnings) == 1 and "[1 - m for m in mask]" in warnings[0]
    assert "the non-zero logprobs (sampled tokens) are on " in warnings[0]  # the toy's actions are sampled: their logprobs speak


@pytest.mark.parametrize("first", ["model", "environment"])
def test_a_correct_env_mask_gives_no_warning(multi_turn_trainer, tokenizer, caplog, first):
    trainer = multi_turn_trainer(speaking_first(ToyEnvironment(tokenizer), first), adv_estimator="gigpo", max_steps=1)
    with caplog.at_level(logging.WARNING, logger="rllm_trl.rollouts"):
        trainer.train()
    assert not [r for r in caplog.records if r.name == "rllm_trl.rollouts"]
    if first == "environment":
        assert (trainer.outputs[0]["tool_mask"][:, 0] == 0).all()  # every completion opened with the environment's token


@pytest.mark.parametrize(
    "output, message",
    [
        ({"completion_ids": [[1, 2], [3]], "env_mask": [[1, 0]]}, r"env_mask has 1 rows for 2 completions"),
        ({"completion_ids": [[1, 2], [3]], "env_mask": [[1, 0], [2]]}, r"completion 1 of this process's batch: env_mask holds 2; use 1 on the model's tokens"),
        ({"completion_ids": [[1, 2], [3]], "env_mask": [[1, 0], 1]}, r"completion 1 of this process's batch: env_mask must be a list of one entry per token"),
    ],
)
def test_rollout_output_checks_name_the_row(output, message):
    from rllm_trl.rollouts import check_rollout_output

    with pytest.raises(ValueError, match=message):
        check_rollout_output(output)


def test_a_trainer_with_composite_of_gigpo_and_grpo_trains_on_their_weighted_sum(multi_turn_trainer):
    terms = [["gigpo", 1.0, {"gamma": 0.9}], ["grpo", 2.0]]
    trainer = multi_turn_trainer(adv_estimator="composite", adv_estimator_kwargs={"terms": terms}, max_steps=1)
    trainer.train()
    for record in trainer.outputs:
        ids, mask = record["completion_ids"].numpy(), (record["completion_mask"] * record["tool_mask"]).numpy()
        gigpo, _ = plain_gigpo(ids, mask, record["rewards"].tolist(), 4, 0.9, 1.0)
        grpo, _ = plain_gigpo(ids, mask, record["rewards"].tolist(), 4, 0.9, 0.0)  # w = 0: the episode's GRPO on every model token
        np.testing.assert_allclose(record["advantages"].numpy(), gigpo + 2.0 * grpo, rtol=0, atol=1e-5)


@pytest.mark.parametrize("term", [["pkpo", 1.0, {"k": 4}], ["passk_training", 1.0, {"k": 5}]])
def test_config_refuses_a_composite_term_whose_k_reaches_num_generations_as_it_refuses_the_term_alone(tmp_path, term):
    common = {"output_dir": str(tmp_path), "use_cpu": True, "report_to": "none", "num_generations": 4}
    with pytest.raises(ValueError, match=rf"num_generations=4: estimator '{term[0]}': k={term[2]['k']}"):
        RLLMGRPOConfig(**common, adv_estimator=term[0], adv_estimator_kwargs=term[2])
    with pytest.raises(ValueError, match=rf"num_generations=4: estimator 'composite', term 1 \('{term[0]}'\): estimator '{term[0]}': k={term[2]['k']}"):
        RLLMGRPOConfig(**common, adv_estimator="composite", adv_estimator_kwargs={"terms": [["grpo", 1.0], term]})


def functional_rows(seed: int, rows: int = 8):
    ids, completion, tool = random_batch(np.random.default_rng(seed), rows, 10)
    turns = local_turns(completion, tool)
    prompts = np.full((rows, 2), 7)
    return row_turns(ids, completion, turns, [{}] * rows, with_anchors=True, prompt_ids=prompts, prompt_mask=np.ones_like(prompts))


def test_a_stateful_composite_term_keeps_its_running_baseline_in_the_trainers_state():
    from rllm_plugins.state.store import EstimatorState

    state, b = EstimatorState(), 0.0
    for seed in range(3):
        rows = functional_rows(seed)
        rewards = np.random.default_rng(10 + seed).choice([0.0, 0.5, 1.0], size=len(rows))
        result = step_advantages(rows, rewards, 4, "composite", {"terms": [["rae", 1.0, {"decay": 0.5}]]}, state=state)
        for i, reward in enumerate(rewards):  # RAE by hand, rows in order: A = r - b, then b <- 0.5 b + 0.5 r, on every turn of the row
            assert result.values[result.offsets[i] : result.offsets[i + 1]] == pytest.approx(reward - b, abs=1e-12)
            b = 0.5 * b + 0.5 * reward
        assert state.get("composite", "all_groups") == {"terms": {"0:rae": {"baseline": pytest.approx(b, abs=1e-12)}}}


def test_a_length_weighted_composite_term_gets_the_completion_lengths():
    rows = functional_rows(4)
    rewards = np.array([1.0, 0.0, 0.5, 0.0, 1.0, 1.0, 0.0, 0.5])
    lengths = np.arange(1.0, 9.0)
    result = step_advantages(rows, rewards, 4, "composite", {"terms": [["opo", 1.0]]}, lengths=lengths)
    for g in range(2):
        r, n = rewards[4 * g : 4 * g + 4], lengths[4 * g : 4 * g + 4]
        for i in range(4 * g, 4 * g + 4):  # OPO by hand: r - the group's length-weighted mean reward
            assert result.values[result.offsets[i] : result.offsets[i + 1]] == pytest.approx(rewards[i] - (r * n).sum() / n.sum(), abs=1e-12)
    with pytest.raises(ValueError, match="reads the completion lengths, and none were given"):
        step_advantages(rows, rewards, 4, "composite", {"terms": [["opo", 1.0]]})


ONE_TERM_OPTIONS = {"pkpo": {"k": 2}, "passk_training": {"k": 2}, "rae": {"decay": 0.5, "key_by": "task"}, "gigpo": {"gamma": 0.9}}


# a value-based estimator's returns are a critic's targets, which a sum of terms has not: composite refuses it (tests/steps)
@pytest.mark.parametrize("name", sorted(n for n in available_estimators() if n != "composite" and not get_estimator_spec(n).needs_values))
def test_a_one_term_composite_is_the_term_alone_on_the_gathered_rows(name):
    """For every registered estimator: composite([[e, 1.0, opts]]) on the turn path gives what e gives alone (an outcome-level
    one on TRL's outcome path, broadcast to the row's turns), lengths and state included."""
    from rllm_trl.outcome import compute_advantages, prepare_batch

    from rllm_plugins.state.store import EstimatorState

    rows = functional_rows(6)
    rewards = torch.tensor([[1.0], [0.0], [0.5], [0.0], [1.0], [1.0], [0.0], [0.25]])
    tasks = ["p", "p", "p", "p", "q", "q", "q", "q"]
    batch = prepare_batch(rewards, torch.ones(1), 4, lengths=torch.arange(1, 9), task_ids=tasks)
    options = ONE_TERM_OPTIONS.get(name, {})
    norm = {"norm_adv_by_std_in_grpo": True}
    inside_state, alone_state = EstimatorState(), EstimatorState()
    inside = step_advantages(
        rows, batch.rewards, 4, "composite", {"terms": [[name, 1.0, options]], **norm}, lengths=batch.lengths, task_ids=batch.task_ids, state=inside_state
    )
    if get_estimator_spec(name).level == "step":
        alone = step_advantages(rows, batch.rewards, 4, name, {**options, **norm}).values
    else:
        per_row = compute_advantages(batch, name, estimator_kwargs=options, state=alone_state)
        alone = np.repeat(per_row, np.diff(inside.offsets))
    np.testing.assert_allclose(inside.values, alone, rtol=1e-12, atol=1e-12)
    if get_estimator_spec(name).stateful:
        assert inside_state.get("composite", "all_groups") == {"terms": {f"0:{name}": alone_state.get(name, "all_groups")}}
