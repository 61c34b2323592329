"""Checks on what a ``rollout_func`` returns, before TRL pads it (TRL fails later with a raw torch size error).

TRL's ``rollout_func(prompts, trainer)`` returns per-completion lists ``prompt_ids``, ``completion_ids``,
``logprobs`` and optionally ``env_mask``: one entry per completion token, **1 on the model's tokens**
(sampled by the model, trained on) and **0 on the environment's** (tool or environment output). TRL
turns ``env_mask`` into ``tool_mask``; the loss, and the turns of a step-level estimator, follow it.

- an ``env_mask`` row longer or shorter than its ``completion_ids`` row, or a value other than 0/1, is a
  ``ValueError`` naming the completion, the lengths and the fix;
- an ``env_mask`` that looks inverted (0 on the first token of every completion: the environment
  would have spoken first in every episode) is logged once as a warning saying what to do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["check_rollout_output", "checked_rollout_func"]

logger = logging.getLogger(__name__)

ENV_MASK_KEY = "env_mask"


def _row_length(value: Any, key: str, row: int) -> int:
    try:
        return len(value)
    except TypeError:
        where = f"rollout_func output, completion {row} of this process's batch"
        raise ValueError(f"{where}: {key} must be a list of one entry per token, got {type(value).__name__}") from None


def check_rollout_output(output: Mapping[str, Any]) -> bool:
    """Raise ``ValueError`` for an ``env_mask`` that does not match ``completion_ids``; True when it looks inverted (see the module)."""
    masks = output.get(ENV_MASK_KEY) if isinstance(output, Mapping) else None
    if masks is None:
        return False
    completions: Sequence[Any] | None = output.get("completion_ids")
    if completions is None:  # TRL names the missing key itself
        return False
    if len(masks) != len(completions):
        raise ValueError(
            f"rollout_func output: env_mask has {len(masks)} rows for {len(completions)} completions (completion_ids); "
            "return one env_mask per completion, in the same order"
        )
    starts_with_environment = 0
    for row, (mask, ids) in enumerate(zip(masks, completions, strict=True)):
        mask_length, ids_length = _row_length(mask, ENV_MASK_KEY, row), _row_length(ids, "completion_ids", row)
        if mask_length != ids_length:
            raise ValueError(
                f"rollout_func output, completion {row} of this process's batch: env_mask has {mask_length} entries for "
                f"{ids_length} completion_ids; give one entry per completion token (1 on the model's tokens, 0 on the environment's)"
            )
        values = list(mask)
        wrong = next((m for m in values if not (m == 0 or m == 1)), None)
        if wrong is not None:
            raise ValueError(
                f"rollout_func output, completion {row} of this process's batch: env_mask holds {wrong}; use 1 on the model's tokens and 0 on the environment's"
            )
        starts_with_environment += bool(values) and values[0] == 0
    non_empty = sum(1 for ids in completions if len(ids))
    return non_empty > 0 and starts_with_environment == non_empty


def checked_rollout_func(rollout_func: Callable[..., Any]) -> Callable[..., Any]:
    """``rollout_func`` whose output passes :func:`check_rollout_output` before TRL reads it (the inverted-mask warning once)."""
    warned = False

    def rollout(prompts: list[Any], trainer: Any) -> Any:
        nonlocal warned
        output = rollout_func(prompts, trainer)
        if check_rollout_output(output) and not warned:
            warned = True
            logger.warning(
                "rollout_func output: env_mask is 0 on the first token of every completion, as if the environment spoke first "
                "in every episode. env_mask is 1 on the model's tokens (the ones it sampled and is trained on) and 0 on the "
                "environment's; if yours marks the environment with 1, return [1 - m for m in mask] for each completion"
            )
        return output

    rollout.__wrapped__ = rollout_func  # type: ignore[attr-defined]
    return rollout
