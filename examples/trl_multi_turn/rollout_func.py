"""Multi-turn GRPO with turn-level credit (``gigpo``) in TRL through a ``rollout_func``, on a CPU, offline.

    python examples/trl_multi_turn/rollout_func.py --steps 30

The environment is :mod:`game` (higher-or-lower: find a hidden digit in 3 guesses). Each episode is one
completion ``guess answer guess answer guess``: the model's tokens and the environment's, interleaved.

The ``rollout_func`` contract (TRL 1.16, ``GRPOTrainer(rollout_func=...)``), as this script follows it:

- TRL calls ``rollout_func(prompts, trainer)`` on each process with that process's prompts of one
  generation batch, **already repeated**: each prompt ``num_generations`` times in a row (TRL's sampler
  repeats them). Return exactly one completion per prompt received, in the same order: the completions of
  one prompt form its group.
- Sample from ``trainer.model``, the policy being trained (``trainer.processing_class`` is its tokenizer;
  with vLLM, generate through ``trainer.vllm_generation`` instead).
- Return ``prompt_ids``, ``completion_ids`` (model and environment tokens interleaved) and ``logprobs``:
  one per completion token, the sampling log-probability of each model token; give environment tokens
  any finite number (0.0 here): TRL reads ``logprobs`` only where ``env_mask`` is 1 (vLLM importance
  sampling, off-policy masking).
- ``env_mask`` is **1 on the model's tokens** and 0 on the environment's (TRL calls it ``tool_mask``; the
  loss and the turns of a step-level estimator follow it). rllm_trl checks its length against
  ``completion_ids`` and warns once when every completion starts with a 0 (an inverted mask).
- Every other key (``found`` here) reaches the reward functions as a keyword argument; a step-level
  estimator also reads ``turn_rewards`` and ``anchor_states`` (docs/trl.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL 1.16

import torch
from datasets import Dataset
from rllm_trl import RLLMGRPOConfig, RLLMGRPOTrainer

from rllm_plugins.tiny import build_tiny_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from game import MAX_TURNS, answer, build_game_tokenizer, hidden_digit, prompts


def rollout(prompts: list[str], trainer: Any) -> dict[str, list[Any]]:
    """One episode per prompt received (see the contract above), sampled from ``trainer.model``."""
    tokenizer, model = trainer.processing_class, trainer.model
    out: dict[str, list[Any]] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [], "found": []}
    for prompt in prompts:
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        hidden = hidden_digit(prompt)
        completion, logprobs, env_mask, found = [], [], [], 0.0
        for _ in range(MAX_TURNS):
            with torch.no_grad():
                logits = model(torch.tensor([prompt_ids + completion])).logits[0, -1].float()
            distribution = torch.log_softmax(logits, dim=-1)
            guess = int(torch.multinomial(distribution.exp(), 1))
            completion.append(guess)  # the model's token: env_mask 1, its sampling log-probability
            logprobs.append(float(distribution[guess]))
            env_mask.append(1)
            reply = answer(tokenizer.decode([guess]), hidden)
            completion.append(tokenizer.convert_tokens_to_ids(reply))  # the environment's token: env_mask 0, logprob 0.0
            logprobs.append(0.0)
            env_mask.append(0)
            if reply == "=":
                found = 1.0
                break
        out["prompt_ids"].append(prompt_ids)
        out["completion_ids"].append(completion)
        out["logprobs"].append(logprobs)
        out["env_mask"].append(env_mask)
        out["found"].append(found)
    return out


def found_reward(completions: list[str], found: list[float], **_: Any) -> list[float]:
    """1 when the episode found the digit (the rollout's extra key ``found``, forwarded by TRL)."""
    return list(found)


def main(argv: list[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--estimator", default="gigpo")
    parser.add_argument("--output-dir", default="trl_multi_turn_out")
    options = parser.parse_args(argv)

    tokenizer = build_game_tokenizer()
    model = build_tiny_model(tokenizer, seed=0)
    args = RLLMGRPOConfig(
        output_dir=options.output_dir,
        adv_estimator=options.estimator,  # step-level: one advantage per turn, (B, T) advantages
        adv_estimator_kwargs={"gamma": 0.9, "step_advantage_w": 1.0} if options.estimator == "gigpo" else {},
        per_device_train_batch_size=32,  # 8 prompts x 4 episodes per step
        num_generations=4,
        max_completion_length=2 * MAX_TURNS,
        learning_rate=1e-2,
        beta=0.0,
        max_steps=options.steps,
        logging_steps=1,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    trainer = RLLMGRPOTrainer(
        model=model,
        reward_funcs=[found_reward],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": prompts(40) * (options.steps // 5 + 1)}),
        processing_class=tokenizer,  # an in-memory model: TRL cannot load a tokenizer by name
        rollout_func=rollout,
    )
    trainer.train()
    rewards = [entry["reward"] for entry in trainer.state.log_history if "turn/0/advantage_mean" in entry]
    head, tail = rewards[: min(5, len(rewards))], rewards[-min(5, len(rewards)) :]
    print(f"episodes that found the digit: first steps {sum(head) / len(head):.3f}, last steps {sum(tail) / len(tail):.3f}")
    return rewards


if __name__ == "__main__":
    main()
