"""Reward functions the test configs name by their import path (``trl.reward_funcs``)."""

from __future__ import annotations

from typing import Any


def reward_length(prompts: list[Any], completions: list[str], **_: Any) -> list[float]:
    """Characters in the completion, scaled: rewards that differ within a group."""
    return [len(c) / 4.0 for c in completions]
