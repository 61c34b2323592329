"""The keys a ``rollout_func`` may return that TRL or rllm_trl read, and near misses of them.

TRL reads ``prompt_ids``, ``completion_ids``, ``logprobs`` (required), ``logprob_token_ids`` and
``env_mask``; with a step-level estimator rllm_trl also reads ``turn_rewards`` and ``anchor_states``
(:mod:`.turn_advantages`). Any other key is forwarded to the reward functions, so a misspelt one
(``turn_reward``, ``anchor_state``, ``env_masks``) or another framework's name for one
(``tool_mask``, ``step_rewards``) would train on the defaults without a word: it is refused instead,
naming the key it is close to. A key far from every read one is the reward functions' own and is
left alone, and so is a near miss returned next to the key it resembles. ``turn_rewards`` or
``anchor_states`` returned to a run that does not read them (an outcome-level estimator; one that
compares no anchor states) are the reward functions' only: :func:`unread_step_keys` says why, for a
warning (a run may keep returning them while comparing estimators).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from rllm_trl.turns import ANCHOR_STATES_KEY, TURN_REWARDS_KEY

__all__ = ["STEP_LEVEL_KEYS", "TRL_KEYS", "check_rollout_keys", "closest_read_key", "unread_step_keys"]

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
