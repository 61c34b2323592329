"""The batch ``rllm-plugins bench`` measures on, and the collector's advantages on it (the reference every row must give).

A :class:`Shape` is ``rows`` (B) of ``tokens`` (T) in groups of ``group_size`` answers to one prompt, each row an episode of
``turns`` turns. :func:`make_batch` draws one batch of that shape and holds it twice:

- as trajectories (:attr:`BenchBatch.sample`, a :class:`~rllm_plugins.testing.matrix.samples.Sample`): one per row, one
  step per turn, with the turn's reward, its model tokens and its anchor state (the environment tokens before it; the
  first turn is anchored at the prompt), as the collector reads them;
- as token arrays ``(B, T)``, laid out as verl's ``responses`` / ``response_mask`` / ``token_level_rewards``: each turn's
  environment tokens (mask 0), then its model tokens (mask 1) with the turn's reward on the last one; padding after the row.
  The same layout as the conformance matrix's verl paths (``rllm_verl.conformance.legacy.encode``).

A row's outcome is the sum of its turn rewards. ``rewards="binary"``: every turn 0 but the last, 0 or 1 (what estimators
meant for 0/1 outcomes need); ``"graded"``: every turn 0, 1/2 or 1. Turns split the row's model tokens at random; the
environment segments come from a vocabulary of :data:`ENV_SEGMENTS` so that anchor states repeat within a group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..testing.matrix.paths import COLLECTOR, PROMPT, Call
from ..testing.matrix.samples import MODEL_TOKEN, Sample, Traj

__all__ = ["ENV_SEGMENTS", "REWARDS", "BenchBatch", "Shape", "ShapeError", "collector_advantages", "make_batch"]

ENV_SEGMENTS = ((3, 4), (4, 3, 5), (5, 5, 3, 4), (3,))  # environment segments between turns (ids below MODEL_TOKEN)
REWARDS = ("binary", "graded")


class ShapeError(ValueError):
    """A shape no batch can have (the message says which number and why)."""


@dataclass(frozen=True)
class Shape:
    """B rows of T tokens, in groups of ``group_size`` (answers to one prompt), ``turns`` turns per row."""

    rows: int
    tokens: int
    group_size: int
    turns: int = 1

    def check(self) -> None:
        """:class:`ShapeError` naming the first number that cannot make a batch."""
        for what, value in (("rows", self.rows), ("tokens", self.tokens), ("group size", self.group_size), ("turns", self.turns)):
            if value < 1:
                raise ShapeError(f"{what} must be at least 1, got {value}")
        if self.rows % self.group_size:
            raise ShapeError(f"rows ({self.rows}) must be a multiple of the group size ({self.group_size})")
        least = self.least_tokens
        if self.tokens < least:
            raise ShapeError(
                f"{self.turns} turns need at least {least} tokens per row (one model token each and the environment's between them), got {self.tokens}"
            )

    @property
    def least_tokens(self) -> int:
        return self.turns + (self.turns - 1) * max(len(s) for s in ENV_SEGMENTS)

    def label(self) -> str:
        return f"{self.rows:,} x {self.tokens:,} (n={self.group_size}, {self.turns} turn{'s' if self.turns != 1 else ''})"


@dataclass
class BenchBatch:
    """One batch of a :class:`Shape`: its trajectories and its ``(B, T)`` arrays (see the module docstring)."""

    shape: Shape
    sample: Sample
    responses: np.ndarray  # (B, T) int64: environment and model token ids
    response_mask: np.ndarray  # (B, T) int64: 1 on model tokens
    token_level_rewards: np.ndarray  # (B, T) float64: each turn's reward on its last model token
    values: np.ndarray  # (B, T) float64: a critic's value of each turn on its model tokens (value-based estimators)
    prompts: np.ndarray  # (B, len(PROMPT)) int64: one prompt for every row
    uid: np.ndarray  # (B,) object: the group's id, repeated group_size times
    step_of_token: np.ndarray  # (B, T) int32: the flat step (turn) each model token belongs to, -1 elsewhere

    @property
    def num_steps(self) -> int:
        return self.sample.num_steps

    def on_tokens(self, per_step: np.ndarray) -> np.ndarray:
        """``(B, T)`` float64: each step's value on its model tokens, 0 elsewhere (what a token-level path writes)."""
        per_step = np.asarray(per_step, dtype=np.float64)
        return np.where(self.step_of_token >= 0, per_step[np.maximum(self.step_of_token, 0)], 0.0)

    def position(self, flat: int, layout: str) -> str:
        """Where a flat index of an output in ``layout`` (``"tokens"``: ``(B, T)`` flattened; ``"steps"``: one per step) lies."""
        if layout == "tokens":
            row, token = divmod(int(flat), self.shape.tokens)
            step = int(self.step_of_token[row, token])
            where = f"turn {step - int(self._first_step[row])}" if step >= 0 else "no model token"
            return f"row {row}, token {token} ({where})"
        row = int(np.searchsorted(self._first_step, flat, side="right") - 1)
        return f"step {flat} (row {row}, turn {int(flat) - int(self._first_step[row])})"

    @property
    def _first_step(self) -> np.ndarray:
        sizes = [len(t.step_rewards) for g in self.sample.groups for t in g]
        return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)


def _split(rng: np.random.Generator, total: int, parts: int) -> list[int]:
    """``total`` as ``parts`` positive numbers at random."""
    if parts == 1:
        return [total]
    cuts = np.sort(rng.choice(np.arange(1, total), parts - 1, replace=False))
    return np.diff(np.concatenate([[0], cuts, [total]])).astype(int).tolist()


def make_batch(shape: Shape, rewards: str = "binary", seed: int = 0) -> BenchBatch:
    """One batch of ``shape`` (see the module docstring); the same ``seed`` draws the same batch."""
    shape.check()
    if rewards not in REWARDS:
        raise ValueError(f"rewards must be one of {', '.join(REWARDS)}, got {rewards!r}")
    rng = np.random.default_rng(seed)
    critic = np.random.default_rng([seed, 1])
    b, t, k = shape.rows, shape.tokens, shape.turns
    responses = np.zeros((b, t), dtype=np.int64)
    mask = np.zeros((b, t), dtype=np.int64)
    token_rewards = np.zeros((b, t), dtype=np.float64)
    values = np.zeros((b, t), dtype=np.float64)
    step_of_token = np.full((b, t), -1, dtype=np.int32)
    groups: list[tuple[Traj, ...]] = []
    step = 0
    for g in range(b // shape.group_size):
        trajs = []
        for i in range(shape.group_size):
            row = g * shape.group_size + i
            anchors = ((), *(ENV_SEGMENTS[int(s)] for s in rng.integers(0, len(ENV_SEGMENTS), k - 1)))
            env = sum(len(a) for a in anchors)
            least = k + env
            length = int(rng.integers(max(least, t // 2), t + 1))
            lengths = _split(rng, length - env, k)
            binary = (*[0.0] * (k - 1), float(rng.integers(0, 2)))
            step_rewards = binary if rewards == "binary" else tuple(float(x) / 2 for x in rng.integers(0, 3, k))
            step_values = tuple(float(x) / 8 for x in critic.integers(-8, 9, k))
            pos = 0
            for turn, (anchor, n, reward, value) in enumerate(zip(anchors, lengths, step_rewards, step_values, strict=True)):
                responses[row, pos : pos + len(anchor)] = anchor
                pos += len(anchor)
                responses[row, pos : pos + n] = MODEL_TOKEN + turn
                mask[row, pos : pos + n] = 1
                values[row, pos : pos + n] = value
                step_of_token[row, pos : pos + n] = step
                token_rewards[row, pos + n - 1] = reward
                pos += n
                step += 1
            trajs.append(Traj(float(sum(step_rewards)), step_rewards, tuple(lengths), anchors, step_values))
        groups.append(tuple(trajs))
    uid = np.repeat(np.array([f"task{g}" for g in range(b // shape.group_size)], dtype=object), shape.group_size)
    prompts = np.tile(np.array(PROMPT, dtype=np.int64), (b, 1))
    return BenchBatch(shape, Sample(tuple(groups), "step"), responses, mask, token_rewards, values, prompts, uid, step_of_token)


def collector_advantages(batch: BenchBatch, name: str, options: Mapping[str, Any], transforms: Sequence[tuple[str, Mapping[str, Any]]] = ()) -> np.ndarray:
    """Every step's advantage ``(S,)`` float64 from ``collect_reward_and_advantage_from_trajectory_groups`` (the reference) on
    the batch's trajectories, with ``name``'s ``options`` and the advantage ``transforms`` selected after it."""
    call = Call(name, dict(options), tuple((n, dict(o)) for n, o in transforms))
    return COLLECTOR.run(call, batch.sample, None).advantages
