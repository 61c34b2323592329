"""Multi-turn GRPO with turn-level credit (``gigpo``) in TRL through its tool loop, ``GRPOTrainer(tools=[...])``.

    python examples/trl_multi_turn/tools.py                                  # the tiny local model, offline
    python examples/trl_multi_turn/tools.py --model ./Qwen2.5-0.5B-Instruct  # a tool-calling chat model saved locally

The game of :mod:`game` (higher-or-lower) with a plain function as the tool: TRL offers ``guess`` in the
chat template, runs every call the model writes, appends the result (``tool_mask`` 0) and lets the model
continue, at most :data:`game.MAX_TURNS` times. A function sees only the arguments the model writes, so
every episode hides the same digit, :data:`SECRET` (a digit per episode is what ``environment_factory``
is for: ``environment_factory.py``). The reward reads the tool results in the episode's messages. Each
model turn between tool results is one turn of a step-level estimator, the result before it its anchor.

As in ``environment_factory.py``, :mod:`warm_start` first teaches the random tiny model the call format
(a chat model that calls tools, ``--model``, needs none), and the script pins torch's kernels
(``examples/demo/kernels.py``) when run as a script, so it prints the same numbers on any x86-64 CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded
sys.path.insert(0, str(Path(__file__).resolve().parent))
if __name__ == "__main__" and not any(arg.startswith("--model") for arg in sys.argv):  # the tiny model as a script: its numbers the same on any x86-64 CPU
    from pinned import pin_demo_kernels

    pin_demo_kernels()

from datasets import Dataset
from game import MAX_TURNS, answer, prompts
from rllm_trl import RLLMGRPOConfig, RLLMGRPOTrainer
from transformers import AutoModelForCausalLM, AutoTokenizer
from turn_table import turn_table
from warm_start import warm_tiny_model

SECRET = 6
GIGPO_OPTIONS = {"gamma": 0.9, "step_advantage_w": 1.0}


def guess(digit: int) -> str:
    """
    Guess the hidden digit.

    Args:
        digit: A digit from 0 to 9.

    Returns:
        "=" when it is the hidden digit, "<" when the hidden digit is lower, ">" when it is higher.
    """
    return answer(str(digit), SECRET)


class FoundReward:
    """The reward function: 1 when a tool result of the episode is ``=``; ``replies`` keeps the last batch's tool results."""

    __name__ = "found_reward"  # TRL names a reward function's metrics by it

    def __init__(self) -> None:
        self.replies: list[list[str]] = []

    def __call__(self, completions: list[list[dict[str, Any]]], **_: Any) -> list[float]:
        """``completions``: each episode's messages after the prompt, the tool results (``role`` "tool") included."""
        self.replies = [[m["content"] for m in messages if m["role"] == "tool"] for messages in completions]
        return [1.0 if "=" in replies else 0.0 for replies in self.replies]


def dataset(count: int) -> Dataset:
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": p}] for p in prompts(count)]})


def build_trainer(model: Any, tokenizer: Any, reward: FoundReward, steps: int, output_dir: str, estimator: str = "gigpo") -> RLLMGRPOTrainer:
    args = RLLMGRPOConfig(
        output_dir=output_dir,
        adv_estimator=estimator,  # step-level: one advantage per model turn, (B, T) advantages
        adv_estimator_kwargs=GIGPO_OPTIONS if estimator == "gigpo" else {},
        per_device_train_batch_size=16,  # 2 prompts x 8 episodes per step
        num_generations=8,
        max_completion_length=192,  # every turn and tool result of an episode
        max_tool_calling_iterations=MAX_TURNS,
        learning_rate=1e-3,
        beta=0.0,
        max_steps=steps,
        logging_steps=1,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    return RLLMGRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=dataset(max(2 * steps, 2)),
        processing_class=tokenizer,  # an in-memory model: TRL cannot load a tokenizer by name
        tools=[guess],
    )


def main(argv: list[str] | None = None) -> RLLMGRPOTrainer:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--model", default=None, help="a local directory of a tool-calling chat model (default: the tiny model, warm-started)")
    parser.add_argument("--warm-start-steps", type=int, default=150, help="supervised steps that teach the tiny model the call format")
    parser.add_argument("--estimator", default="gigpo")
    parser.add_argument("--output-dir", default="trl_tools_out")
    options = parser.parse_args(argv)
    if options.model is None:
        tokenizer, model = warm_tiny_model(dataset(10)["prompt"], [guess], lambda _: SECRET, options.warm_start_steps)
    else:
        tokenizer, model = AutoTokenizer.from_pretrained(options.model), AutoModelForCausalLM.from_pretrained(options.model)
    reward = FoundReward()
    trainer = build_trainer(model, tokenizer, reward, options.steps, options.output_dir, options.estimator)
    trainer.train()
    turns = [entry["batch/all_groups/turns/mean"] for entry in trainer.state.log_history if "batch/all_groups/turns/mean" in entry]
    print(f"turns per episode, by step: {turns}")
    print(turn_table(trainer, reward.replies, GIGPO_OPTIONS))
    return trainer


if __name__ == "__main__":
    main()
