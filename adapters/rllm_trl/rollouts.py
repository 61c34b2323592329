"""Checks on what a ``rollout_func`` returns, before TRL pads it (TRL fails later with a raw torch size error).

TRL's ``rollout_func(prompts, trainer)`` returns per-completion lists ``prompt_ids``, ``completion_ids``,
``logprobs`` and optionally ``env_mask``: one entry per completion token, **1 on the model's tokens**
(sampled by the model, trained on) and **0 on the environment's** (tool or environment output). TRL
turns ``env_mask`` into ``tool_mask``; the loss, and the turns of a step-level estimator, follow it.

- an ``env_mask`` row longer or shorter than its ``completion_ids`` row, or a value other than 0/1, is a
  ``ValueError`` naming the completion, the lengths and the fix;
- an ``env_mask`` that looks inverted (1 on the environment's tokens), judged by where turns end and
  where the sampling log-probabilities are, not by who speaks first (below, "The direction of env_mask"), is
  logged once as a warning saying what to do;
- a key that is a near miss of one TRL or rllm_trl reads (``turn_reward`` for ``turn_rewards``) is a
  ``ValueError`` naming the key it is close to (below, "The keys a rollout_func returns");
- ``env_mask`` (or a near miss of it) returned to a trainer with tools is a ``ValueError``: TRL then runs its
  tool loop on the completions and writes ``tool_mask`` itself, passing ``env_mask`` to the reward functions only;
- ``turn_rewards`` / ``anchor_states`` returned to a run that does not read them is logged once as a warning.
"""

from __future__ import annotations

import difflib
import logging
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rllm_trl.turns import ANCHOR_STATES_KEY, TURN_REWARDS_KEY

__all__ = [
    "STEP_LEVEL_KEYS",
    "TRL_KEYS",
    "MaskEvidence",
    "check_env_mask_is_read",
    "check_rollout_keys",
    "check_rollout_output",
    "checked_rollout_func",
    "closest_read_key",
    "mask_evidence",
    "unread_step_keys",
]

logger = logging.getLogger(__name__)

ENV_MASK_KEY = "env_mask"


# ---------------------------------------------------------------- The keys a rollout_func returns
#
# The keys a ``rollout_func`` may return that TRL or rllm_trl read, and near misses of them.
#
# TRL reads ``prompt_ids``, ``completion_ids``, ``logprobs`` (required), ``logprob_token_ids`` and
# ``env_mask``; with a step-level estimator rllm_trl also reads ``turn_rewards`` and ``anchor_states``
# (:mod:`rllm_trl.turns`). Any other key is forwarded to the reward functions, so a misspelt one
# (``turn_reward``, ``anchor_state``, ``env_masks``) or another framework's name for one
# (``tool_mask``, ``step_rewards``) would train on the defaults without a word: it is refused instead,
# naming the key it is close to. A key far from every read one is the reward functions' own and is
# left alone, and so is a near miss returned next to the key it resembles. ``turn_rewards`` or
# ``anchor_states`` returned to a run that does not read them (an outcome-level estimator; one that
# compares no anchor states) are the reward functions' only: :func:`unread_step_keys` says why, for a
# warning (a run may keep returning them while comparing estimators).

TRL_KEYS: dict[str, str] = {
    "prompt_ids": "per completion, the prompt's token ids",
    "completion_ids": "per completion, its token ids",
    "logprobs": "per completion, one sampling log-probability per token",
    "logprob_token_ids": "per completion, the token ids of its logprobs",
    "env_mask": "per completion, 1 on the model's tokens and 0 on the environment's",
}
STEP_LEVEL_KEYS: dict[str, str] = {
    TURN_REWARDS_KEY: "per completion, one reward per model turn",
    ANCHOR_STATES_KEY: "per completion, one hashable anchor state per model turn",
}
OTHER_NAMES = {"tool_mask": "env_mask", "step_rewards": TURN_REWARDS_KEY}  # TRL's internal name, the core's and verl's name
CUTOFF = 0.8  # difflib ratio: 'turn_reward' vs 'turn_rewards' is 0.96, 'rewards' vs 'turn_rewards' 0.74


def _normal(key: str) -> str:
    return key.lower().replace("-", "_")


def closest_read_key(key: str, read: Iterable[str]) -> str | None:
    """The read key ``key`` is a near miss of (another name for it, or a spelling within :data:`CUTOFF`), else None."""
    read = list(read)
    if key in read:
        return None
    if OTHER_NAMES.get(_normal(key)) in read:
        return OTHER_NAMES[_normal(key)]
    normal = {_normal(k): k for k in read}
    close = difflib.get_close_matches(_normal(key), list(normal), n=1, cutoff=CUTOFF)
    return normal[close[0]] if close else None


def check_rollout_keys(output: Mapping[str, object], *, step_level: bool) -> None:
    """Raise ``ValueError`` for a key of ``output`` that is a near miss of a read key ``output`` does not have."""
    read = {**TRL_KEYS, **(STEP_LEVEL_KEYS if step_level else {})}
    for key in output:
        if not isinstance(key, str):
            continue
        closest = closest_read_key(key, read)
        if closest is None or closest in output:
            continue
        raise ValueError(
            f"rollout_func output: key {key!r} is not one TRL or rllm_trl reads, and is close to {closest!r} ({read[closest]}); "
            f"TRL would only pass {key!r} to the reward functions and train without it. Rename it to {closest!r}, or, if it is "
            "meant for your reward functions only, to a name further from it"
        )


def unread_step_keys(estimator: str, *, step_level: bool, anchors: bool) -> dict[str, str]:
    """The step-level keys a run of ``estimator`` does not read, each with why: ``step_level``, and with ``anchors`` compared."""
    if not step_level:
        why = f"adv_estimator={estimator!r} is outcome-level (one advantage per completion, from its reward)"
        return {TURN_REWARDS_KEY: why, ANCHOR_STATES_KEY: why}
    if not anchors:
        return {ANCHOR_STATES_KEY: f"adv_estimator={estimator!r} with these options compares no anchor states (gigpo does)"}
    return {}


# ---------------------------------------------------------------- The direction of env_mask
#
# Whether a ``rollout_func``'s ``env_mask`` marks the model's tokens (1) or, inverted, the environment's, whichever side speaks first.
#
# Position 0 says nothing: an episode may open with the environment's observation. Two signals do,
# both read from what TRL's own tool loop (``tools=``, ``environment_factory``) puts where:
#
# - **where turns end**: the model stops at an end-of-turn token (``trainer.eos_token_ids``, what TRL
#   counts as a finished completion), so the model's runs end there; TRL's tool results end with the chat
#   template's next generation prompt instead. Runs of ``env_mask == 0`` ending at one while no run of
#   ``env_mask == 1`` does is the inverted pattern;
# - **where the sampling log-probabilities are**: the model's tokens carry the log-probability they were
#   sampled with (almost surely non-zero); the environment's carry a filler, ``0.0`` in TRL's tool loop and in
#   the documented contract. Non-zero ``logprobs`` only where ``env_mask`` is 0 is the inverted pattern.
#
# A signal speaks only when its pattern is one-sided; the mask is reported as inverted when one signal says
# so and none says the opposite (rollouts whose logprobs are all equal and whose turns end without an
# end-of-turn token give no verdict: nothing is said).


@dataclass(frozen=True)
class MaskEvidence:
    """Counts over one batch: runs of each ``env_mask`` value that end at an end-of-turn token, and tokens with a non-zero logprob."""

    model_runs_ending_turn: int = 0
    environment_runs_ending_turn: int = 0
    model_sampled_tokens: int = 0
    environment_sampled_tokens: int = 0

    @staticmethod
    def _verdict(model: int, environment: int) -> bool | None:
        """True: as documented (1 on the model's), False: inverted, None: the signal does not tell."""
        if model and not environment:
            return True
        if environment and not model:
            return False
        return None

    @property
    def inverted(self) -> bool:
        """One signal says inverted and none says as documented."""
        verdicts = {
            self._verdict(self.model_runs_ending_turn, self.environment_runs_ending_turn),
            self._verdict(self.model_sampled_tokens, self.environment_sampled_tokens),
        }
        return False in verdicts and True not in verdicts

    def explain(self) -> str:
        """The one-sided patterns, in words."""
        said = []
        if self._verdict(self.model_runs_ending_turn, self.environment_runs_ending_turn) is False:
            said.append(f"{self.environment_runs_ending_turn} run(s) with env_mask 0 end at the end-of-turn token, none with env_mask 1 does")
        if self._verdict(self.model_sampled_tokens, self.environment_sampled_tokens) is False:
            said.append(f"the non-zero logprobs (sampled tokens) are on {self.environment_sampled_tokens} token(s) with env_mask 0, none with env_mask 1")
        return "; ".join(said)


def _runs(mask: Sequence[int]) -> list[tuple[int, int, int]]:
    """``(value, start, end)`` of each maximal run of equal values."""
    runs, start = [], 0
    for t in range(1, len(mask) + 1):
        if t == len(mask) or mask[t] != mask[start]:
            runs.append((int(mask[start]), start, t))
            start = t
    return runs


def _sampled(logprob: Any) -> bool:
    """A finite, non-zero log-probability (``None`` and NaN, TRL's "unknown", say nothing)."""
    try:
        value = float(logprob)
    except (TypeError, ValueError):
        return False
    return math.isfinite(value) and value != 0.0


def mask_evidence(masks: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], logprobs: Any, end_of_turn: Collection[int]) -> MaskEvidence:
    """The evidence of one batch (``masks`` already checked 0/1 and as long as their ``completions``)."""
    ends = {int(token) for token in end_of_turn}
    model_ends = environment_ends = model_sampled = environment_sampled = 0
    rows = logprobs if isinstance(logprobs, Sequence) and len(logprobs) == len(masks) else [None] * len(masks)
    for mask, ids, row_logprobs in zip(masks, completions, rows, strict=True):
        mask = [int(m) for m in mask]
        for value, _, end in _runs(mask):
            if int(ids[end - 1]) in ends:
                model_ends += value
                environment_ends += 1 - value
        if isinstance(row_logprobs, Sequence) and len(row_logprobs) == len(mask):
            for m, logprob in zip(mask, row_logprobs, strict=True):
                if _sampled(logprob):
                    model_sampled += m
                    environment_sampled += 1 - m
    return MaskEvidence(model_ends, environment_ends, model_sampled, environment_sampled)


# ---------------------------------------------------------------- The checks
#
# What check_rollout_output and checked_rollout_func run on each output.


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
    run does not read, each with why (:func:`unread_step_keys`); returning one is said once.
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
