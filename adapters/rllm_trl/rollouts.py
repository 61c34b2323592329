"""Checks on what a ``rollout_func`` returns, before TRL pads it (TRL fails later with a raw torch size error).

TRL's ``rollout_func(prompts, trainer)`` returns per-completion lists ``prompt_ids``, ``completion_ids``,
``logprobs`` and optionally ``env_mask``: one entry per completion token, **1 on the model's tokens**
(sampled by the model, trained on) and **0 on the environment's** (tool or environment output). TRL
turns ``env_mask`` into ``tool_mask``; the loss, and the turns of a step-level estimator, follow it.

- an ``env_mask`` row longer or shorter than its ``completion_ids`` row, or a value other than 0/1, is a
  ``ValueError`` naming the completion, the lengths and the fix;
- an ``env_mask`` that looks inverted (1 on the environment's tokens), judged by where turns end and
  where the sampling log-probabilities are, not by who speaks first (:mod:`.mask_direction`), is logged
  once as a warning saying what to do;
- a key that is a near miss of one TRL or rllm_trl reads (``turn_reward`` for ``turn_rewards``) is a
  ``ValueError`` naming the key it is close to (:mod:`.rollout_keys`);
- ``env_mask`` (or a near miss of it) returned to a trainer with tools is a ``ValueError``: TRL then runs its
  tool loop on the completions and writes ``tool_mask`` itself, passing ``env_mask`` to the reward functions only;
- ``turn_rewards`` / ``anchor_states`` returned to a run that does not read them is logged once as a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from rllm_trl.mask_direction import MaskEvidence, mask_evidence
from rllm_trl.rollout_keys import check_rollout_keys, closest_read_key

__all__ = ["check_env_mask_is_read", "check_rollout_output", "checked_rollout_func"]

logger = logging.getLogger(__name__)

ENV_MASK_KEY = "env_mask"


def _row_length(value: Any, key: str, row: int) -> int:
    try:
        return len(value)
    except TypeError:
        where = f"rollout_func output, completion {row} of this process's batch"
        raise ValueError(f"{where}: {key} must be a list of one entry per token, got {type(value).__name__}") from None


def check_rollout_output(output: Mapping[str, Any], *, step_level: bool = False, end_of_turn: Collection[int] = (), judge: bool = True) -> MaskEvidence | None:
    """Raise ``ValueError`` for a near-miss key or an ``env_mask`` that does not match ``completion_ids``; the mask's evidence.

    ``step_level``: the keys of a step-level estimator are read too; ``end_of_turn``: the token ids the model
    stops at. None without an ``env_mask``, or when not asked to ``judge`` its direction.
    """
    if not isinstance(output, Mapping):
        return None
    check_rollout_keys(output, step_level=step_level)
    masks = output.get(ENV_MASK_KEY)
    if masks is None:
        return None
    completions: Sequence[Any] | None = output.get("completion_ids")
    if completions is None:  # TRL names the missing key itself
        return None
    if len(masks) != len(completions):
        raise ValueError(
            f"rollout_func output: env_mask has {len(masks)} rows for {len(completions)} completions (completion_ids); "
            "return one env_mask per completion, in the same order"
        )
    for row, (mask, ids) in enumerate(zip(masks, completions, strict=True)):
        mask_length, ids_length = _row_length(mask, ENV_MASK_KEY, row), _row_length(ids, "completion_ids", row)
        if mask_length != ids_length:
            raise ValueError(
                f"rollout_func output, completion {row} of this process's batch: env_mask has {mask_length} entries for "
                f"{ids_length} completion_ids; give one entry per completion token (1 on the model's tokens, 0 on the environment's)"
            )
        wrong = next((m for m in mask if not (m == 0 or m == 1)), None)
        if wrong is not None:
            raise ValueError(
                f"rollout_func output, completion {row} of this process's batch: env_mask holds {wrong}; use 1 on the model's tokens and 0 on the environment's"
            )
    return mask_evidence(masks, completions, output.get("logprobs"), end_of_turn) if judge else None


def check_env_mask_is_read(output: Mapping[str, Any], trainer: Any) -> None:
    """Raise ``ValueError`` when ``output`` has an ``env_mask`` (or a near miss of it, ``tool_mask``) that ``trainer``'s tool
    loop would replace (TRL 1.16 reads it only without tools)."""
    tools = getattr(trainer, "tools", None)
    if not tools:
        return
    key = next((k for k in output if isinstance(k, str) and (k == ENV_MASK_KEY or closest_read_key(k, [ENV_MASK_KEY]) == ENV_MASK_KEY)), None)
    if key is not None:
        names = [getattr(tool, "__name__", type(tool).__name__) for tool in tools]
        raise ValueError(
            f"rollout_func output: {key} is returned, but the trainer also has tools {names} (tools= or an environment_factory's): "
            "TRL then runs its own tool loop on the rollout_func's completions, writes the tool mask itself and passes "
            f"{key} to the reward functions only. Either let the rollout_func run the environment (no tools on the trainer; "
            "return env_mask) or let TRL's tool loop do it (return no mask)"
        )


def checked_rollout_func(rollout_func: Callable[..., Any], *, step_level: bool = False, unread: Mapping[str, str] | None = None) -> Callable[..., Any]:
    """``rollout_func`` whose output passes :func:`check_rollout_output` before TRL reads it (the inverted-mask warning once).

    The end-of-turn tokens are the trainer's ``eos_token_ids`` (TRL's), read at each call. ``unread``: keys the
    run does not read, each with why (:func:`.rollout_keys.unread_step_keys`); returning one is said once.
    """
    warned = False
    told = not unread

    def rollout(prompts: list[Any], trainer: Any) -> Any:
        nonlocal warned, told
        output = rollout_func(prompts, trainer)
        if isinstance(output, Mapping):
            check_env_mask_is_read(output, trainer)
            ignored = {key: why for key, why in (unread or {}).items() if key in output}
            if ignored and not told:
                told = True
                logger.warning(
                    "rollout_func output: %s returned and not read, as %s; TRL passes them to the reward functions only. "
                    "Select a step-level estimator that reads them (gigpo reads both, turn_grpo and step_reinforce read turn_rewards), "
                    "or stop returning them",
                    " and ".join(ignored),
                    next(iter(ignored.values())),
                )
        end_of_turn = getattr(trainer, "eos_token_ids", None) or ()
        evidence = check_rollout_output(output, step_level=step_level, end_of_turn=end_of_turn, judge=not warned)
        if evidence is not None and evidence.inverted:
            warned = True
            logger.warning(
                "rollout_func output: env_mask looks inverted, 1 on the environment's tokens: %s. env_mask is 1 on the model's tokens "
                "(the ones it sampled and is trained on) and 0 on the environment's, whichever speaks first; if yours marks the "
                "environment with 1, return [1 - m for m in mask] for each completion",
                evidence.explain(),
            )
        return output

    rollout.__wrapped__ = rollout_func  # type: ignore[attr-defined]
    return rollout
