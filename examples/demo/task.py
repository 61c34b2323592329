"""The toy task: single-digit addition (``"3+4="`` -> ``"7"``) with an exact-match reward.

The tokenizer knows only the task's characters (digits, ``+``, ``=``) and the special tokens,
so a random 75k-parameter model already answers with a digit now and then and can learn from
the reward within a few dozen steps.
"""

from __future__ import annotations

import random
import re

from datasets import Dataset
from transformers import PreTrainedTokenizerFast

from rllm_plugins.tiny import build_char_tokenizer

__all__ = ["ALPHABET", "MAX_OPERAND", "addition_dataset", "build_task_tokenizer", "exact_match_reward", "leading_number"]

ALPHABET = "0123456789+="
MAX_OPERAND = 3  # operands 0..3: answers 0..6 are one token each

_LEADING_NUMBER = re.compile(r"\d+")


def build_task_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level tokenizer over :data:`ALPHABET` plus ``rllm_plugins.tiny``'s special tokens (16 tokens)."""
    return build_char_tokenizer(ALPHABET)


def addition_dataset(num_examples: int, seed: int, max_operand: int = MAX_OPERAND) -> Dataset:
    """``num_examples`` prompts ``"a+b="`` with ``0 <= a, b <= max_operand`` and their answers ``str(a + b)``."""
    rng = random.Random(seed)
    pairs = [(rng.randint(0, max_operand), rng.randint(0, max_operand)) for _ in range(num_examples)]
    return Dataset.from_dict({"prompt": [f"{a}+{b}=" for a, b in pairs], "answer": [str(a + b) for a, b in pairs]})


def leading_number(completion: str) -> str | None:
    """The digits the completion starts with (``"7="`` -> ``"7"``), or None."""
    match = _LEADING_NUMBER.match(completion)
    return match.group(0) if match else None


def exact_match_reward(completions: list[str], answer: list[str], **_: object) -> list[float]:
    """1.0 where the number a completion starts with is exactly the answer, else 0.0 (a TRL reward function)."""
    return [float(leading_number(c) == a) for c, a in zip(completions, answer, strict=True)]
