"""The multi-turn toy environment, and training on it with ``RLLMGRPOTrainer`` through a ``rollout_func``.

An episode: the prompt is a digit and ``=`` (``"3="``). For :data:`TURNS` turns the model emits one
token and the environment answers ``+`` when it was the prompt's digit, ``=`` otherwise. The reward is
the share of right turns. The observations are aliased states: ``+`` after turn 1 is reached from
every right first move, ``=`` from every wrong one, so the turn after it is compared (by ``gigpo``)
with the turns of other episodes that saw the same observation, whatever their history.

Each episode is one completion ``x1 o1 x2 o2 x3`` whose ``env_mask`` is ``1 0 1 0 1``; TRL turns it
into ``tool_mask``, and a step-level estimator gives each model turn its own advantage.
"""

from __future__ import annotations

import random
import tempfile
from typing import Any

import torch
from datasets import Dataset
from rllm_trl import RLLMGRPOTrainer
from task import build_task_tokenizer
from training import HIDDEN_SIZE, PROMPTS_PER_STEP, RunResult, demo_config, train_and_record

from rllm_plugins.tiny import build_tiny_model

__all__ = ["ESTIMATOR_KWARGS", "TURNS", "CopyEnvironment", "episode_reward", "prompt_dataset", "train_multi_turn"]

TURNS = 3
ESTIMATOR_KWARGS: dict[str, dict[str, Any]] = {"gigpo": {"gamma": 0.9, "step_advantage_w": 1.0}}  # others: their defaults


class CopyEnvironment:
    """Steps every episode of a batch at once: the model's token, then the environment's ``+``/``=``."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.right, self.wrong = tokenizer.convert_tokens_to_ids("+"), tokenizer.convert_tokens_to_ids("=")

    def rollout(self, prompts: list[str], trainer: Any) -> dict[str, Any]:
        """TRL's ``rollout_func``: sample each turn from the trainer's model (all prompts have the same length)."""
        prompt_ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        targets = torch.tensor([ids[0] for ids in prompt_ids])
        context = torch.tensor(prompt_ids)
        completion, logprobs, env_mask, right = [], [], [], torch.zeros(len(prompts))
        model = trainer.model
        for turn in range(TURNS):
            with torch.no_grad():
                logp = torch.log_softmax(model(context).logits[:, -1].float(), dim=-1)
            action = torch.multinomial(logp.exp(), 1).squeeze(1)
            hit = action == targets
            right += hit.float()
            step = [action.unsqueeze(1)]
            completion.append(action)
            logprobs.append(logp.gather(1, action.unsqueeze(1)).squeeze(1))
            env_mask.append(torch.ones_like(action))
            if turn < TURNS - 1:
                observation = torch.where(hit, self.right, self.wrong)
                completion.append(observation)
                logprobs.append(torch.zeros(len(prompts)))
                env_mask.append(torch.zeros_like(action))
                step.append(observation.unsqueeze(1))
            context = torch.cat([context, *step], dim=1)
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": torch.stack(completion, dim=1).tolist(),
            "logprobs": torch.stack(logprobs, dim=1).tolist(),
            "env_mask": torch.stack(env_mask, dim=1).tolist(),
            "share_right": (right / TURNS).tolist(),
        }


def episode_reward(completions: list[Any], share_right: list[float], **_: Any) -> list[float]:
    """The share of right turns (the rollout's extra key ``share_right``, forwarded by TRL)."""
    return list(share_right)


def prompt_dataset(num_examples: int, seed: int) -> Dataset:
    """``num_examples`` prompts ``"d="``, ``d`` a random digit."""
    rng = random.Random(seed)
    return Dataset.from_dict({"prompt": [f"{rng.randint(0, 9)}=" for _ in range(num_examples)]})


def train_multi_turn(estimator: str, steps: int, seed: int) -> RunResult:
    """Train a freshly built model (same ``seed``: same weights and prompts for every estimator) on the environment."""
    tokenizer = build_task_tokenizer()
    result = RunResult(estimator)
    with tempfile.TemporaryDirectory(prefix="rllm_demo_multi_turn_") as scratch:
        kwargs = ESTIMATOR_KWARGS.get(estimator)
        config = demo_config(scratch, estimator, steps, seed, adv_estimator_kwargs=kwargs, max_completion_length=2 * TURNS - 1)
        env = CopyEnvironment(tokenizer)
        trainer = RLLMGRPOTrainer(
            model=build_tiny_model(tokenizer, seed=seed, hidden_size=HIDDEN_SIZE),
            reward_funcs=episode_reward,
            args=config,
            train_dataset=prompt_dataset(steps * PROMPTS_PER_STEP, seed),
            processing_class=tokenizer,
            rollout_func=env.rollout,
        )
        train_and_record(trainer, f"{estimator} (multi-turn)", result, label_width=22)
    return result
