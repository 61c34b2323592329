"""A role's trajectory groups as a :class:`~rllm_plugins.steps.StepBatch`: step rewards and anchor states, checked.

Step reward: ``Step.reward``; a trajectory none of whose steps carries a reward (every ``Step.reward``
0, the default) has its outcome on its last step, the rule verl (token rewards of an outcome-only reward
manager) and TRL (no ``turn_rewards``) follow too. Anchor state: ``Step.metadata["anchor_state"]`` when
present, else ``Step.observation``; None counts as missing. Value (for value-based estimators): ``Step.value``,
a finite number; its model tokens: ``len(Step.response_ids)`` when every step has some, else every step
weighs 1. Errors name role, group, trajectory and step.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Hashable, Mapping, Sequence

import numpy as np

from ..calling import as_finite_real, describe
from ..segments import offsets_from_sizes
from ..types import Step, TrajectoryGroup
from .anchors import anchor_ids
from .batch import StepBatch

__all__ = ["ANCHOR_KEY", "anchor_state", "step_batch_from_groups"]

ANCHOR_KEY = "anchor_state"  # Step.metadata[ANCHOR_KEY]: the step's anchor state, overriding Step.observation


def anchor_state(step: Step) -> Hashable | None:
    """The step's anchor state: ``metadata["anchor_state"]``, else ``observation`` (None: none)."""
    if isinstance(step.metadata, Mapping) and step.metadata.get(ANCHOR_KEY) is not None:
        return step.metadata[ANCHOR_KEY]  # type: ignore[no-any-return]
    return step.observation  # type: ignore[no-any-return]


def step_batch_from_groups(
    groups: Sequence[TrajectoryGroup],
    outcomes: Sequence[np.ndarray],
    where: Callable[[int, int], str],
    *,
    with_anchors: bool,
    who: str,
    with_lengths: bool = False,
    with_values: bool = False,
) -> StepBatch:
    """The groups' steps, flat; ``outcomes[g]`` are group ``g``'s trajectory rewards, ``where(g, i)`` names a trajectory.

    ``with_anchors``: every step needs an anchor state (the estimator ``who`` reads them); ``with_lengths``: each
    trajectory's response length (its steps' ``response_ids``) goes into ``StepBatch.lengths``; ``with_values``: every
    step needs a ``Step.value`` (a value-based estimator), and the batch carries each step's model tokens. Values are
    gathered in one pass and checked in bulk; the slow search for the culprit runs only on error.
    """
    step_counts: list[int] = []
    lengths: list[int] = []
    rewards: list[object] = []
    states: list[Hashable | None] = []
    critic: list[object] = []
    tokens: list[int] = []
    for g, group in enumerate(groups):
        for i, traj in enumerate(group.trajectories):
            if not traj.steps:
                raise ValueError(f"{where(g, i)}: the trajectory has no steps; {who} gives one advantage per step")
            step_counts.append(len(traj.steps))
            if with_lengths:
                lengths.append(sum(len(step.response_ids) for step in traj.steps))
            rewards.extend([step.reward for step in traj.steps])
            if with_anchors:
                states.extend([anchor_state(step) for step in traj.steps])
            if with_values:
                critic.extend([getattr(step, "value", None) for step in traj.steps])
                tokens.extend([len(step.response_ids) for step in traj.steps])
    traj_offsets = offsets_from_sizes([len(g.trajectories) for g in groups])
    step_offsets = offsets_from_sizes(step_counts)

    def place(s: int) -> str:
        i = int(np.searchsorted(step_offsets, s, side="right") - 1)
        g = int(np.searchsorted(traj_offsets, i, side="right") - 1)
        return f"{where(g, i - int(traj_offsets[g]))}, step {s - int(step_offsets[i])}"

    step_rewards = _checked_rewards(rewards, place)
    flat_outcomes = np.concatenate(outcomes) if outcomes else np.zeros(0)
    _outcome_on_silent_last_steps(step_rewards, step_offsets, flat_outcomes)
    anchors = None
    if with_anchors:
        if any(state is None for state in states):
            s = next(s for s, state in enumerate(states) if state is None)
            raise ValueError(f"{place(s)}: no anchor state; {who} needs one per step: set Step.observation or Step.metadata[{ANCHOR_KEY!r}] (any hashable)")
        step_group = np.repeat(np.arange(len(groups)), np.diff(step_offsets[traj_offsets]))
        anchors = anchor_ids(states, step_group, place)
    step_values = step_tokens = None
    if with_values:
        step_values = _checked_values(critic, place, who)
        step_tokens = np.array(tokens, dtype=np.float64) if all(tokens) else None
    return StepBatch(
        outcomes=flat_outcomes,
        traj_offsets=traj_offsets,
        step_rewards=step_rewards,
        step_offsets=step_offsets,
        anchors=anchors,
        anchor_states=states if with_anchors else None,
        lengths=np.array(lengths, dtype=np.float64) if with_lengths else None,
        step_values=step_values,
        step_tokens=step_tokens,
    )


def _checked_values(values: list[object], place: Callable[[int], str], who: str) -> np.ndarray:
    """Each step's ``Step.value`` as float64 ``(S,)``: present, a finite real number."""
    out = np.empty(len(values), dtype=np.float64)
    for s, value in enumerate(values):
        number = None if value is None else as_finite_real(value)
        if number is None:
            got = "none (Step.value is None)" if value is None else describe(value)
            raise ValueError(f"{place(s)}: {who} needs a critic's value of every step, got {got}; set Step.value to a finite number")
        out[s] = number
    return out


def _outcome_on_silent_last_steps(step_rewards: np.ndarray, step_offsets: np.ndarray, outcomes: np.ndarray) -> None:
    """In place: the last step of each trajectory whose steps carry no reward (all 0) gets the trajectory's outcome ``(N,)``."""
    if step_rewards.size == 0:
        return
    carried = np.add.reduceat(step_rewards != 0, step_offsets[:-1])  # every trajectory has a step (checked above)
    silent = carried == 0
    if silent.any():
        step_rewards[step_offsets[1:][silent] - 1] = outcomes[silent]


def _checked_rewards(rewards: list[object], place: Callable[[int], str]) -> np.ndarray:
    """Step rewards as float64 ``(S,)``: real numbers (bools and numpy bools count as 0/1, as outcome rewards), finite."""
    try:
        if all(isinstance(r, numbers.Real) for r in rewards):
            values = np.array(rewards, dtype=np.float64)
            if np.isfinite(values).all():
                return values
    except (TypeError, ValueError, OverflowError):
        pass
    values = np.empty(len(rewards), dtype=np.float64)
    for s, reward in enumerate(rewards):
        number = as_finite_real(reward)
        if number is None:
            raise ValueError(f"{place(s)}: step reward must be a finite number, got {describe(reward)}")
        values[s] = number
    return values
