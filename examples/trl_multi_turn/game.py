"""Higher-or-lower, a toy multi-turn environment: find a hidden digit in at most :data:`MAX_TURNS` guesses.

Each turn the agent guesses a digit; the environment answers ``<`` (the hidden digit is lower), ``>``
(higher), ``=`` (found: the episode ends) or ``?`` (not a digit). The reward is 1 when the digit is
found, else 0. The answers are aliased states: ``>`` after a guess of 3 is the same observation
whatever came before, so a step-level estimator (``gigpo``) compares the turns that saw it.

The hidden digit of prompt ``"n:"`` is ``(7 n + 3) mod 10``: fixed per prompt, not written in it. The
tokenizer knows only the game's characters, so a random tiny model guesses a digit about half the time.
"""

from __future__ import annotations

from transformers import PreTrainedTokenizerFast

from rllm_plugins.tiny import build_char_tokenizer

__all__ = ["ANSWERS", "MAX_TURNS", "answer", "build_game_tokenizer", "hidden_digit", "prompts"]

MAX_TURNS = 3
ANSWERS = ("<", ">", "=", "?")
ALPHABET = "0123456789:<>=?"


def build_game_tokenizer() -> PreTrainedTokenizerFast:
    """One token per character of :data:`ALPHABET`, plus ``rllm_plugins.tiny``'s special tokens (19 tokens)."""
    return build_char_tokenizer(ALPHABET)


def prompts(count: int) -> list[str]:
    """``count`` prompts ``"0:"``, ``"1:"``, ..."""
    return [f"{n}:" for n in range(count)]


def hidden_digit(prompt: str) -> int:
    """The digit the episode of ``prompt`` (``"n:"``) hides."""
    return (7 * int(prompt.rstrip(":")) + 3) % 10


def answer(guess: str, hidden: int) -> str:
    """The environment's answer to the guess ``guess`` (a token's text) when ``hidden`` is hidden."""
    if not (len(guess) == 1 and guess.isdigit()):
        return "?"
    return "=" if int(guess) == hidden else "<" if hidden < int(guess) else ">"
