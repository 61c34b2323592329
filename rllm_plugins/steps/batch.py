"""Steps, flat: what a step-level estimator reads (:class:`StepBatch`), and discounted returns.

A role's task groups hold trajectories, which hold steps (turns). Flat, in one order:

- ``outcomes`` ``(N,)`` float64: each trajectory's reward; task group ``g`` owns
  ``outcomes[traj_offsets[g]:traj_offsets[g + 1]]`` (``traj_offsets`` ``(G + 1,)``);
- ``step_rewards`` ``(S,)`` float64: each step's reward; trajectory ``i`` owns
  ``step_rewards[step_offsets[i]:step_offsets[i + 1]]`` (``step_offsets`` ``(N + 1,)``), in turn order;
- ``anchors`` ``(S,)`` int64 or None: each step's anchor group; steps with equal ids form one
  anchor group, and an id never spans two task groups (:func:`rllm_plugins.steps.anchors.anchor_ids`
  builds them from any hashable states);
- ``anchor_states`` ``(S,)`` sequence or None: the states the ids were built from, in step order (read only
  by similarity grouping, :mod:`rllm_plugins.steps.similarity`; the builders pass their list, no copy);
- ``lengths`` ``(N,)`` float64 or None: each trajectory's response tokens, given when the estimator reads
  them (:mod:`rllm_plugins.needs`; ``composite`` hands them to a length-weighted term).
- ``step_values`` ``(S,)`` float64 or None: a critic's value of each step's state (``Step.value``; verl: the
  critic's ``values`` at the turn's first model token), given to estimators whose spec says ``needs_values=True``;
- ``step_tokens`` ``(S,)`` float64 or None: each step's number of model tokens (its weight where statistics are
  taken over tokens, as verl's ``gae`` whitens); None: every step weighs 1.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..segments import GroupLayout

__all__ = ["StepBatch", "discounted_returns", "discounted_sums"]


def _offsets(value: np.ndarray, name: str, total: int) -> np.ndarray:
    offsets = np.asarray(value)
    if offsets.ndim != 1 or offsets.size == 0 or not np.issubdtype(offsets.dtype, np.integer):
        raise ValueError(f"StepBatch.{name} must be a 1-D integer array of boundaries, got {offsets.dtype} shape {offsets.shape}")
    GroupLayout.from_offsets(offsets, total)  # validates start, end and order
    return offsets.astype(np.int64, copy=False)


def _per_step(value: np.ndarray, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """``value`` as float64 ``(S,)``: one finite number per step (``step_tokens``: also >= 0)."""
    values = np.asarray(value, dtype=np.float64)
    if values.shape != shape:
        raise ValueError(f"StepBatch.{name} must hold one number per step {shape}, got shape {values.shape}")
    bad = ~np.isfinite(values) if name == "step_values" else ~(np.isfinite(values) & (values >= 0))
    if bad.any():
        s = int(np.flatnonzero(bad)[0])
        raise ValueError(f"StepBatch.{name}[{s}] is {values[s]}; give a finite number{' >= 0' if name == 'step_tokens' else ''}")
    return values


@dataclass(frozen=True, eq=False)
class StepBatch:
    """One role's task groups, trajectories and steps as flat arrays (see the module docstring for the layout)."""

    outcomes: np.ndarray
    traj_offsets: np.ndarray
    step_rewards: np.ndarray
    step_offsets: np.ndarray
    anchors: np.ndarray | None = None
    anchor_states: Sequence[Hashable] | None = None
    lengths: np.ndarray | None = None
    step_values: np.ndarray | None = None
    step_tokens: np.ndarray | None = None

    def __post_init__(self) -> None:
        outcomes = np.asarray(self.outcomes, dtype=np.float64)
        step_rewards = np.asarray(self.step_rewards, dtype=np.float64)
        if outcomes.ndim != 1 or step_rewards.ndim != 1:
            raise ValueError(f"StepBatch: outcomes and step_rewards must be 1-D, got shapes {outcomes.shape} and {step_rewards.shape}")
        object.__setattr__(self, "outcomes", outcomes)
        object.__setattr__(self, "step_rewards", step_rewards)
        object.__setattr__(self, "traj_offsets", _offsets(self.traj_offsets, "traj_offsets", outcomes.size))
        object.__setattr__(self, "step_offsets", _offsets(self.step_offsets, "step_offsets", step_rewards.size))
        if self.step_offsets.size != outcomes.size + 1:
            raise ValueError(f"StepBatch: step_offsets has {self.step_offsets.size - 1} trajectories, outcomes {outcomes.size}")
        if self.lengths is not None:
            lengths = np.asarray(self.lengths, dtype=np.float64)
            if lengths.shape != outcomes.shape:
                raise ValueError(f"StepBatch.lengths must hold one response length per trajectory {outcomes.shape}, got shape {lengths.shape}")
            if not (np.isfinite(lengths) & (lengths >= 0)).all():
                i = int(np.flatnonzero(~(np.isfinite(lengths) & (lengths >= 0)))[0])
                raise ValueError(f"StepBatch.lengths: trajectory {i} has length {lengths[i]}; lengths must be finite and >= 0")
            object.__setattr__(self, "lengths", lengths)
        if self.anchors is not None:
            anchors = np.asarray(self.anchors)
            if anchors.shape != step_rewards.shape or not np.issubdtype(anchors.dtype, np.integer):
                raise ValueError(f"StepBatch.anchors must be an integer array of one id per step {step_rewards.shape}, got {anchors.dtype} {anchors.shape}")
            if anchors.size and anchors.min() < 0:
                raise ValueError("StepBatch.anchors must be ids >= 0")
            anchors = anchors.astype(np.int64, copy=False)
            object.__setattr__(self, "anchors", anchors)
            if self.anchor_states is not None and len(self.anchor_states) != anchors.size:
                raise ValueError(f"StepBatch.anchor_states has {len(self.anchor_states)} states for {anchors.size} steps")
            if anchors.size:
                owner = np.empty(int(anchors.max()) + 1, dtype=np.int64)
                owner[anchors] = self.step_group
                if not np.array_equal(owner[anchors], self.step_group):
                    s = int(np.flatnonzero(owner[anchors] != self.step_group)[0])
                    raise ValueError(
                        f"StepBatch.anchors: anchor id {int(anchors[s])} spans several task groups (step {s}); anchor groups never mix task groups"
                    )
        for name in ("step_values", "step_tokens"):
            given = getattr(self, name)
            if given is not None:
                object.__setattr__(self, name, _per_step(given, name, step_rewards.shape))

    @property
    def num_groups(self) -> int:
        return int(self.traj_offsets.size - 1)

    @property
    def num_trajectories(self) -> int:
        return int(self.outcomes.size)

    @property
    def num_steps(self) -> int:
        return int(self.step_rewards.size)

    def warn_if_steps_carry_nothing(self, estimator: str) -> None:
        """Warn when every step reward is 0 while the outcomes differ: an estimator of step returns then sees no signal."""
        if self.num_steps and not self.step_rewards.any() and np.ptp(self.outcomes) > 0:
            import warnings

            warnings.warn(
                f"estimator {estimator!r}: every step reward is 0 while the trajectory rewards differ, so the step returns carry no "
                "signal; give each step its reward (Step.reward; with only an outcome, the last step's reward is the outcome)",
                UserWarning,
                stacklevel=3,
            )

    def place(self, s: int) -> str:
        """Step ``s`` (flat) named by task group, trajectory in its group and step in its trajectory (for errors)."""
        i = int(np.searchsorted(self.step_offsets, s, side="right") - 1)
        g = int(np.searchsorted(self.traj_offsets, i, side="right") - 1)
        return f"task group {g}, trajectory {i - int(self.traj_offsets[g])}, step {s - int(self.step_offsets[i])}"

    @cached_property
    def trajectories(self) -> GroupLayout:
        """Trajectories in task groups (reductions over ``outcomes``)."""
        return GroupLayout.from_offsets(self.traj_offsets, self.num_trajectories)

    @cached_property
    def steps(self) -> GroupLayout:
        """Steps in trajectories: ``steps.expand(per_trajectory)`` gives each step its trajectory's value."""
        return GroupLayout.from_offsets(self.step_offsets, self.num_steps)

    @cached_property
    def group_step_offsets(self) -> np.ndarray:
        """``(G + 1,)`` boundaries of each task group's steps."""
        return self.step_offsets[self.traj_offsets]

    @cached_property
    def step_group(self) -> np.ndarray:
        """``(S,)`` task group of each step."""
        return GroupLayout.from_offsets(self.group_step_offsets, self.num_steps).group_index


_SHORT = 32  # trajectories up to this many steps: discounted_returns passes over the steps once per distance


def discounted_returns(step_rewards: np.ndarray, step_offsets: np.ndarray, gamma: float) -> np.ndarray:
    """``G_t = r_t + gamma * G_{t+1}`` within each trajectory (``G`` of its last step = its reward) -> ``(S,)`` float64.

    Vectorised over trajectories: one pass per distance from a trajectory's end, in the order of
    the plain backward loop (so equal to it bit for bit). Rewards near the float64 range whose
    returns overflow are summed again scaled down by a power of two (exact), so every return that
    float64 can hold is finite; one it cannot hold is a ``ValueError`` naming the step.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        returns = discounted_sums(step_rewards, step_offsets, gamma)
    if np.isfinite(returns).all():
        return returns
    rewards = np.asarray(step_rewards, dtype=np.float64)
    if not np.isfinite(rewards).all():
        return returns
    longest = int(np.diff(np.asarray(step_offsets)).max())
    shift = max(1, longest.bit_length())  # |G| <= (steps of the trajectory) * max |r| < 2**shift * max float
    with np.errstate(over="ignore", invalid="ignore"):
        returns = np.ldexp(discounted_sums(np.ldexp(rewards, -shift), step_offsets, gamma), shift)
    if not np.isfinite(returns).all():
        s = int(np.flatnonzero(~np.isfinite(returns))[0])
        i = int(np.searchsorted(step_offsets, s, side="right") - 1)
        raise ValueError(
            f"the discounted return of trajectory {i} (in batch order), step {s - int(step_offsets[i])} is beyond the float64 range "
            f"(|G| > 1.8e308, gamma {gamma}); scale the step rewards down"
        )
    return returns


def discounted_sums(step_rewards: np.ndarray, step_offsets: np.ndarray, gamma: float) -> np.ndarray:
    """``G_t = r_t + gamma * G_{t+1}`` within each trajectory ``(S,)`` float64, without the overflow handling of
    :func:`discounted_returns` (a sum past the float64 range is inf); GAE sums its TD errors with it (``gamma * lam``)."""
    returns = np.array(step_rewards, dtype=np.float64)
    layout = GroupLayout.from_offsets(step_offsets, returns.size)
    if returns.size == 0 or gamma == 0:
        return returns
    ends = layout.expand(layout.offsets[1:])  # (S,) one past each step's trajectory end
    from_end = ends - np.arange(returns.size) - 1
    longest = int(from_end.max())
    if longest == 0:
        return returns
    if longest <= _SHORT:  # typical agent episodes: one masked pass per distance beats a sort
        for distance in range(1, longest + 1):
            steps = np.flatnonzero(from_end == distance)
            returns[steps] += gamma * returns[steps + 1]
        return returns
    order = np.argsort(from_end.astype(np.int32), kind="stable")  # a radix sort for small integer keys
    bounds = np.cumsum(np.bincount(from_end, minlength=longest + 1))
    for distance in range(1, longest + 1):
        steps = order[bounds[distance - 1] : bounds[distance]]
        returns[steps] += gamma * returns[steps + 1]
    return returns
