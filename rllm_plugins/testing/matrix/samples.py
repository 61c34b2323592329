"""Sample inputs of the conformance matrix: task groups of trajectories, the same data every path encodes its own way.

A :class:`Sample` holds task groups; a :class:`Traj` its outcome reward, one reward per step (turn), the number
of model tokens of each step and the anchor of each step (the environment tokens right before it; ``()`` for
the first step, anchored at the prompt). Rewards are multiples of 1/8, exact in float32, so that paths that
compute in float32 see the same numbers. An outcome-level sample has one step per trajectory; a step-level
sample's outcome is the sum of its step rewards (verl's rule: a row's reward is its token rewards' sum).

Advantages are compared flat, one value per step in (group, trajectory, step) order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

__all__ = ["ENV_TOKENS", "Sample", "Traj", "derangement", "generate", "groups_deranged"]

ENV_TOKENS = (3, 4)  # the vocabulary of environment segments: small, so anchor states repeat
MODEL_TOKEN = 10  # model token ids are MODEL_TOKEN + the step's index (never an environment token)


@dataclass(frozen=True)
class Traj:
    """One trajectory: ``reward`` (outcome), per step ``step_rewards``, ``lengths`` (model tokens, >= 1), ``anchors`` and
    ``values`` (a critic's value of each step's state, for value-based estimators; they scale with the rewards)."""

    reward: float
    step_rewards: tuple[float, ...]
    lengths: tuple[int, ...]
    anchors: tuple[tuple[int, ...], ...]
    values: tuple[float, ...] = ()

    def scaled(self, factor: float) -> Traj:
        return replace(
            self,
            reward=self.reward * factor,
            step_rewards=tuple(r * factor for r in self.step_rewards),
            values=tuple(v * factor for v in self.values),
        )


@dataclass(frozen=True)
class Sample:
    """Task groups of trajectories (``level``: ``"outcome"``, one step each, or ``"step"``)."""

    groups: tuple[tuple[Traj, ...], ...]
    level: str

    @property
    def num_steps(self) -> int:
        return sum(len(t.step_rewards) for g in self.groups for t in g)

    @property
    def max_abs_reward(self) -> float:
        values = [abs(x) for g in self.groups for t in g for x in (t.reward, *t.step_rewards)]
        return max(values, default=0.0)

    def scaled(self, factor: float) -> Sample:
        return replace(self, groups=tuple(tuple(t.scaled(factor) for t in g) for g in self.groups))

    def step_positions(self) -> list[list[list[int]]]:
        """``[group][trajectory]`` -> the flat positions of its steps."""
        out, at = [], 0
        for group in self.groups:
            rows = []
            for traj in group:
                rows.append(list(range(at, at + len(traj.step_rewards))))
                at += len(traj.step_rewards)
            out.append(rows)
        return out

    def permuted(self, rng: np.random.Generator, *, groups: bool) -> tuple[Sample, np.ndarray]:
        """Every group's trajectories deranged (each one moves, in a group of two or more), and the groups too when
        ``groups`` (each one moves); with ``order``: the permuted sample's flat step ``s`` is the original's step ``order[s]``."""
        positions = self.step_positions()
        group_order = derangement(rng, len(self.groups)) if groups else np.arange(len(self.groups))
        new_groups, order = [], []
        for g in group_order.tolist():
            traj_order = derangement(rng, len(self.groups[g])).tolist()
            new_groups.append(tuple(self.groups[g][i] for i in traj_order))
            for i in traj_order:
                order.extend(positions[g][i])
        return replace(self, groups=tuple(new_groups)), np.array(order, dtype=np.int64)


def groups_deranged(sample: Sample, rng: np.random.Generator) -> tuple[Sample, np.ndarray]:
    """The sample's groups deranged, each group's trajectories in their order; with ``group_order``: group ``p`` of the
    result is the sample's group ``group_order[p]``."""
    group_order = derangement(rng, len(sample.groups))
    return replace(sample, groups=tuple(sample.groups[g] for g in group_order.tolist())), group_order


def derangement(rng: np.random.Generator, n: int) -> np.ndarray:
    """A random permutation of ``range(n)`` that moves every element (a random ``n``-cycle, Sattolo's algorithm); the identity for n < 2."""
    p = np.arange(n)
    for i in range(n - 1, 0, -1):
        j = int(rng.integers(0, i))
        p[i], p[j] = p[j], p[i]
    return p


def _reward(rng: np.random.Generator, binary: bool) -> float:
    return float(rng.integers(0, 2)) if binary else float(rng.integers(-16, 25)) / 8


def generate(seed: int, level: str, sizes: Sequence[int], *, binary: bool = False) -> Sample:
    """A sample of one task group of each size in ``sizes`` (0: an empty group), in an order drawn from ``seed``; rewards 0/1
    when ``binary``, else multiples of 1/8 in [-2, 3].

    Outcome level: one step per trajectory. Step level: 1-3 steps, step rewards in {0, 1/2, 1} (0/1 when
    ``binary``), anchors drawn from :data:`ENV_TOKENS` (so some steps share an anchor group).
    """
    rng = np.random.default_rng(seed)
    critic = np.random.default_rng([seed, 1])  # the critic's values: a stream of their own, so the rewards are as without them
    groups = []
    for size in rng.permutation(np.asarray(sizes, dtype=np.int64)).tolist():
        trajs = []
        for _ in range(size):
            if level == "outcome":
                reward = _reward(rng, binary)
                trajs.append(Traj(reward, (reward,), (int(rng.integers(1, 6)),), ((),)))
                continue
            steps = int(rng.integers(1, 4))
            last = [float(rng.integers(0, 2))]
            step_rewards = tuple([0.0] * (steps - 1) + last) if binary else tuple(float(x) / 2 for x in rng.integers(0, 3, steps))
            anchors = ((), *(tuple(int(x) for x in rng.choice(ENV_TOKENS, int(rng.integers(1, 3)))) for _ in range(steps - 1)))
            lengths = tuple(int(x) for x in rng.integers(1, 4, steps))
            values = tuple(float(x) / 8 for x in critic.integers(-8, 9, steps))  # multiples of 1/8: exact in float32
            trajs.append(Traj(float(sum(step_rewards)), step_rewards, lengths, anchors, values))
        groups.append(tuple(trajs))
    return Sample(tuple(groups), level)
