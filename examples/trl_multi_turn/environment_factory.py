"""Multi-turn GRPO with turn-level credit (``gigpo``) in TRL through ``environment_factory`` and its tool loop.

    python examples/trl_multi_turn/environment_factory.py --steps 2                       # the tiny local model, offline
    python examples/trl_multi_turn/environment_factory.py --model ./Qwen2.5-0.5B-Instruct  # a tool-calling chat model saved locally

The environment is :mod:`game` (higher-or-lower), played through a tool: TRL builds one
:class:`GuessEnvironment` per episode, calls ``reset`` with the dataset row, offers its public methods
(``guess``) as tools in the chat template, runs every tool call the model writes, appends the result
(``tool_mask`` 0) and lets the model continue. Each model turn between tool results is one turn of a
step-level estimator; the tool result before a turn is its anchor state, so the turns after the same
answer (``<``, ``>``) are compared by ``gigpo``.

TRL needs a chat template that renders tool calls and a parser for them: the tiny model here uses
TRL's Qwen2.5 template (TRL knows how to parse it), on a tiny tokenizer trained on the prompts it
renders. A random tiny model never writes a tool call, so its episodes are one turn (reward 0) and
the run only shows the plumbing; with a chat model that calls tools (``--model``), they are
multi-turn and ``trainer.last_step_advantages`` holds one advantage per turn.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is experimental in TRL 1.16

from datasets import Dataset
from rllm_trl import RLLMGRPOConfig, RLLMGRPOTrainer
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl.chat_template_utils import qwen2_5_chat_template

from rllm_plugins.tiny import build_tiny_model, build_tiny_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from game import MAX_TURNS, answer, hidden_digit, prompts


class GuessEnvironment:
    """One episode of the game; ``guess`` is the tool the model calls."""

    def __init__(self) -> None:
        self.hidden, self.guesses, self.found = 0, 0, False

    def reset(self, prompt: list[dict[str, str]], **_: Any) -> None:
        """Start the episode of the dataset row (its prompt names the game); the prompt is shown unchanged."""
        self.hidden, self.guesses, self.found = hidden_digit(prompt[-1]["content"]), 0, False

    def guess(self, digit: int) -> str:
        """
        Guess the hidden digit.

        Args:
            digit: A digit from 0 to 9.

        Returns:
            "=" when it is the hidden digit, "<" when the hidden digit is lower, ">" when it is higher.
        """
        if self.found or self.guesses == MAX_TURNS:
            return "the game is over"
        self.guesses += 1
        reply = answer(str(digit), self.hidden)
        self.found = reply == "="
        return reply


def found_reward(completions: list[Any], environments: list[GuessEnvironment], **_: Any) -> list[float]:
    """1 when the episode's environment saw the hidden digit guessed (TRL passes the episodes' environments)."""
    return [1.0 if env.found else 0.0 for env in environments]


def dataset(count: int) -> Dataset:
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": p}] for p in prompts(count)]})


def build_tiny_tool_tokenizer() -> Any:
    """A tiny tokenizer with TRL's Qwen2.5 chat template, trained on the prompts as that template renders them with the tool."""
    probe = build_tiny_tokenizer(prompts(10))
    probe.chat_template = qwen2_5_chat_template
    rendered = [probe.apply_chat_template(p, tools=[GuessEnvironment.guess], add_generation_prompt=True, tokenize=False) for p in dataset(10)["prompt"]]
    tokenizer = build_tiny_tokenizer([*rendered, '<tool_call>\n{"name": "guess", "arguments": {"digit": 5}}\n</tool_call>'], vocab_size=512)
    tokenizer.chat_template = qwen2_5_chat_template
    return tokenizer


def build_trainer(model: Any, tokenizer: Any, steps: int, output_dir: str, estimator: str = "gigpo", max_completion_length: int = 64) -> RLLMGRPOTrainer:
    args = RLLMGRPOConfig(
        output_dir=output_dir,
        adv_estimator=estimator,  # step-level: one advantage per model turn, (B, T) advantages
        adv_estimator_kwargs={"gamma": 0.9, "step_advantage_w": 1.0} if estimator == "gigpo" else {},
        per_device_train_batch_size=8,  # 2 prompts x 4 episodes per step
        num_generations=4,
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
    parser.add_argument("--model", default=None, help="a local directory of a tool-calling chat model (default: the tiny model)")
    parser.add_argument("--estimator", default="gigpo")
    parser.add_argument("--max-completion-length", type=int, default=64)
    parser.add_argument("--output-dir", default="trl_environment_out")
    options = parser.parse_args(argv)
    if options.model is None:
        tokenizer = build_tiny_tool_tokenizer()
        model = build_tiny_model(tokenizer, seed=0)
    else:
        tokenizer, model = AutoTokenizer.from_pretrained(options.model), AutoModelForCausalLM.from_pretrained(options.model)
    trainer = build_trainer(model, tokenizer, options.steps, options.output_dir, options.estimator, options.max_completion_length)
    trainer.train()
    turns = [entry["batch/all_groups/turns/mean"] for entry in trainer.state.log_history if "batch/all_groups/turns/mean" in entry]
    print(f"turns per episode, by step: {turns}")
    return trainer


if __name__ == "__main__":
    main()
