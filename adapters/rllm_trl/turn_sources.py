"""Where a step-level estimator's turns, step rewards and anchor states come from, in words, for the trainer's log.

The trainer says it once, at the first step: which of TRL's multi-turn paths marks the environment's
tokens (``tool_mask``), and for each turn whether its step reward and anchor state are the
``rollout_func``'s own (``turn_rewards``, ``anchor_states``) or the defaults of :mod:`.turn_advantages`.
Without ``tool_mask`` the warning says what the run has instead, and what a step-level estimator
then computes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rllm_trl.turns import ANCHOR_STATES_KEY, TURN_REWARDS_KEY, RowTurns
from rllm_trl.versions import TOOL_PATHS

__all__ = ["MultiTurnPath", "multi_turn_path", "single_turn_warning", "turn_sources"]


@dataclass(frozen=True)
class MultiTurnPath:
    """What a trainer has that can mark environment tokens: ``tools`` (TRL's tool loop), an ``environment_factory``, a ``rollout_func``."""

    tools: bool
    environment_factory: bool
    rollout_func: bool

    def tool_mask_source(self) -> str:
        """Who wrote the ``tool_mask`` of a batch that has one."""
        if self.rollout_func and not self.tools:
            return "the rollout_func's env_mask"
        if self.environment_factory:
            return "TRL's tool loop (the environment_factory's tools)"
        return "TRL's tool loop (tools=...)"

    def missing(self) -> tuple[str, str]:
        """Why a batch has no ``tool_mask``, and how to give it one."""
        if self.rollout_func:
            return "the rollout_func returns no env_mask", "return env_mask from it: 1 on the model's tokens, 0 on the environment's"
        if self.environment_factory:
            return (
                "the environment_factory's environments have no tools (no public method besides reset and get_reward), so TRL runs no tool loop",
                "give the environment a public method the model calls as a tool",
            )
        return "the trainer has no tools, environment_factory or rollout_func", (
            "train through TRL's tool loop (tools=[...]), an environment_factory with tools, or a rollout_func that returns env_mask"
        )


def multi_turn_path(trainer: Any) -> MultiTurnPath:
    """The multi-turn path of a built ``GRPOTrainer``, read from the attributes TRL leaves (:data:`rllm_trl.versions.TOOL_PATHS`)."""
    found = {path.argument: getattr(trainer, path.attribute, None) for path in TOOL_PATHS}
    return MultiTurnPath(
        tools=bool(found["tools"]),
        environment_factory=found["environment_factory"] is not None,
        rollout_func=found["rollout_func"] is not None,
    )


def single_turn_warning(estimator: str, path: MultiTurnPath) -> str:
    """The warning for a step-level ``estimator`` on completions without ``tool_mask``: what the run has, what it computes, the fix."""
    why, fix = path.missing()
    return (
        f"adv_estimator={estimator!r} is step-level, but the completions carry no tool_mask: {why}. Each completion is one turn "
        f"anchored at its prompt and rewarded with its outcome, so {estimator!r} gives one advantage per completion that only rescales "
        "an outcome-level estimator (docs/trl.md, single-turn rule: gigpo = (1 + step_advantage_w) x grpo on groups of two or more "
        f"scorable completions, step_reinforce = grpo). For per-turn credit, {fix}; for single-turn training select 'grpo'"
    )


def turn_sources(estimator: str, rows: RowTurns, path: MultiTurnPath, *, has_tool_mask: bool, needs_anchors: bool) -> str:
    """One line: where the turns, each turn's step reward and (with ``needs_anchors``) anchor state of the gathered ``rows`` came from."""
    active = rows.num_turns > 0
    count = int(active.sum())
    turns = f"turns from {path.tool_mask_source()}" if has_tool_mask else "one turn per completion (no tool_mask)"
    given = sum(bool(active[row]) for row in rows.reward_overrides)
    rewards = "the completion's reward on its last turn, 0 before"
    if given:
        rewards = f"the rollout_func's {TURN_REWARDS_KEY} on {given} of {count} completions" + (f", else {rewards}" if given < count else "")
    parts = [f"adv_estimator={estimator!r}: {turns}", f"step rewards: {rewards}"]
    if needs_anchors:
        given = sum(bool(active[row]) for row in rows.anchor_overrides)
        anchors = "turn 0 the completion's prompt ids, turn k the environment tokens right before it"
        if given:
            anchors = f"the rollout_func's {ANCHOR_STATES_KEY} on {given} of {count} completions" + (f", else {anchors}" if given < count else "")
        parts.append(f"anchor states: {anchors}")
    return "; ".join(parts)
