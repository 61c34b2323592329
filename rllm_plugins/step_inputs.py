"""A role's trajectory groups as a :class:`~rllm_plugins.steps.StepBatch`: step rewards and anchor states, checked.

Step reward: ``Step.reward``. Anchor state: ``Step.metadata["anchor_state"]`` when present, else
``Step.observation``; None counts as missing. Errors name role, group, trajectory and step.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Hashable, Mapping, Sequence

import numpy as np

from .anchors import anchor_ids
from .segments import offsets_from_sizes
from .steps import StepBatch
from .types import Step, TrajectoryGroup

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
) -> StepBatch:
    """The groups' steps, flat; ``outcomes[g]`` are group ``g``'s trajectory rewards, ``where(g, i)`` names a trajectory.

    ``with_anchors``: every step needs an anchor state (the estimator ``who`` reads them).
    """
    step_counts: list[int] = []
    rewards: list[float] = []
    states: list[Hashable] = []
    step_group: list[int] = []
    places: list[tuple[int, int, int]] = []
    for g, group in enumerate(groups):
        for i, traj in enumerate(group.trajectories):
            if not traj.steps:
                raise ValueError(f"{where(g, i)}: the trajectory has no steps; {who} gives one advantage per step")
            step_counts.append(len(traj.steps))
            for t, step in enumerate(traj.steps):
                reward = step.reward
                if not isinstance(reward, numbers.Real) or not math.isfinite(reward):  # bools count as 0/1, as outcome rewards
                    raise ValueError(f"{where(g, i)}, step {t}: step reward must be a finite number, got {type(reward).__name__} {reward!r}")
                rewards.append(float(reward))
                if with_anchors:
                    state = anchor_state(step)
                    if state is None:
                        raise ValueError(
                            f"{where(g, i)}, step {t}: no anchor state; {who} needs one per step: "
                            f"set Step.observation or Step.metadata[{ANCHOR_KEY!r}] (any hashable)"
                        )
                    states.append(state)
                    step_group.append(g)
                    places.append((g, i, t))
    anchors = None
    if with_anchors:
        anchors = anchor_ids(states, step_group, lambda s: f"{where(*places[s][:2])}, step {places[s][2]}")
    return StepBatch(
        outcomes=np.concatenate(outcomes) if outcomes else np.zeros(0),
        traj_offsets=offsets_from_sizes([len(g.trajectories) for g in groups]),
        step_rewards=np.array(rewards, dtype=np.float64),
        step_offsets=offsets_from_sizes(step_counts),
        anchors=anchors,
    )
