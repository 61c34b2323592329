"""Multi-turn GRPO with turn-level credit (``gigpo``) in TRL through ``environment_factory`` and its tool loop.

    python examples/trl_multi_turn/environment_factory.py                                  # the tiny local model, offline
    python examples/trl_multi_turn/environment_factory.py --model ./Qwen2.5-0.5B-Instruct  # a tool-calling chat model saved locally

The environment is :mod:`game` (higher-or-lower), played through a tool: TRL builds one
:class:`GuessEnvironment` per episode, calls ``reset`` with the dataset row, offers its public methods
(``guess``) as tools in the chat template, runs every tool call the model writes, appends the result
(``tool_mask`` 0) and lets the model continue. Each model turn between tool results is one turn of a
step-level estimator; the tool result before a turn is its anchor state, so the turns after the same
answer (``<``, ``>``) are compared by ``gigpo``.

The tiny model starts random and would never write a tool call (one turn per episode, every advantage
0): :mod:`warm_start` first teaches it the call format by supervised steps on scripted games of random
guesses, so its episodes have several turns and the printed per-turn advantages of ``gigpo`` differ from
``grpo``'s. A chat model that calls tools (``--model``) needs no warm start. The script pins torch's
kernels (``examples/demo/kernels.py``) when run as a script, so it prints the same numbers on any
x86-64 CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is experimental in TRL 1.16
sys.path.insert(0, str(Path(__file__).resolve().parent))
if __name__ == "__main__" and not any(arg.startswith("--model") for arg in sys.argv):  # the tiny model as a script: its numbers the same on any x86-64 CPU
    from pinned import pin_demo_kernels

    pin_demo_kernels()

from datasets import Dataset
from game import MAX_TURNS, answer, hidden_digit, prompts
from rllm_trl import RLLMGRPOConfig, RLLMGRPOTrainer
from transformers import AutoModelForCausalLM, AutoTokenizer
from turn_table import turn_table
from warm_start import warm_tiny_model

GIGPO_OPTIONS = {"gamma": 0.9, "step_advantage_w": 1.0}


class GuessEnvironment:
    """One episode of the game; ``guess`` is the tool the model calls, ``replies`` every result it returned."""

    def __init__(self) -> None:
        self.hidden, self.guesses, self.replies, self.found = 0, 0, [], False

    def reset(self, prompt: list[dict[str, str]], **_: Any) -> None:
        """Start the episode of the dataset row (its prompt names the game); the prompt is shown unchanged."""
        self.hidden, self.guesses, self.replies, self.found = hidden_digit(prompt[-1]["content"]), 0, [], False

    def guess(self, digit: int) -> str:
        """
        Guess the hidden digit.

        Args:
            digit: A digit from 0 to 9.

        Returns:
            "=" when it is the hidden digit, "<" when the hidden digit is lower, ">" when it is higher.
        """
        reply = "the game is over" if self.found or self.guesses == MAX_TURNS else answer(str(digit), self.hidden)
        self.guesses += reply != "the game is over"
        self.found = self.found or reply == "="
        self.replies.append(reply)
        return reply


def found_reward(completions: list[Any], environments: list[GuessEnvironment], **_: Any) -> list[float]:
    """1 when the episode's environment saw the hidden digit guessed (TRL passes the episodes' environments)."""
    return [1.0 if env.found else 0.0 for env in environments]


def dataset(count: int) -> Dataset:
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": p}] for p in prompts(count)]})


def build_trainer(model: Any, tokenizer: Any, steps: int, output_dir: str, estimator: str = "gigpo", max_completion_length: int = 192) -> RLLMGRPOTrainer:
    args = RLLMGRPOConfig(
        output_dir=output_dir,
        adv_estimator=estimator,  # step-level: one advantage per model turn, (B, T) advantages
        adv_estimator_kwargs=GIGPO_OPTIONS if estimator == "gigpo" else {},
        per_device_train_batch_size=16,  # 2 prompts x 8 episodes per step
        num_generations=8,
        max_completion_length=max_completion_length,  # every turn and tool result of an episode
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
        reward_funcs=[found_reward],
        args=args,
        train_dataset=dataset(max(2 * steps, 2)),
        processing_class=tokenizer,  # an in-memory model: TRL cannot load a tokenizer by name
        environment_factory=GuessEnvironment,
    )


def main(argv: list[str] | None = None) -> RLLMGRPOTrainer:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--model", default=None, help="a local directory of a tool-calling chat model (default: the tiny model, warm-started)")
    parser.add_argument("--warm-start-steps", type=int, default=150, help="supervised steps that teach the tiny model the call format")
    parser.add_argument("--estimator", default="gigpo")
    parser.add_argument("--max-completion-length", type=int, default=192)
    parser.add_argument("--output-dir", default="trl_environment_out")
    options = parser.parse_args(argv)
    if options.model is None:
        tokenizer, model = warm_tiny_model(dataset(10)["prompt"], [GuessEnvironment.guess], hidden_digit, options.warm_start_steps)
    else:
        tokenizer, model = AutoTokenizer.from_pretrained(options.model), AutoModelForCausalLM.from_pretrained(options.model)
    trainer = build_trainer(model, tokenizer, options.steps, options.output_dir, options.estimator, options.max_completion_length)
    trainer.train()
    turns = [entry["batch/all_groups/turns/mean"] for entry in trainer.state.log_history if "batch/all_groups/turns/mean" in entry]
    print(f"turns per episode, by step: {turns}")
    print(turn_table(trainer, [env.replies for env in trainer.environments], GIGPO_OPTIONS))
    return trainer


if __name__ == "__main__":
    main()
