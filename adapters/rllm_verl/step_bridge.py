"""Step-level rLLM estimators (``rllm_gigpo``, ``rllm_step_reinforce``, ...) on verl's multi-turn rows.

Each row is one episode; its turns, turn rewards and anchor states follow :mod:`rllm_plugins.turns`
(turns: runs of ``response_mask == 1``; turn rewards: ``token_level_rewards`` up to the next turn;
anchors: the ``responses`` token ids of the environment segment before a turn, the prompt for the
first). Rows are grouped by ``uid``; the outcome of a row is its total reward. Every model token of
turn k gets that turn's advantage, every other token 0. ``gamma`` is ``algorithm.gamma`` unless
``algorithm.rllm_estimator_kwargs.gamma`` is set.

verl passes estimators no ``responses``: they are read from the DataProto that ``compute_advantage``
is processing (the ``reward_keys`` extension makes it visible). verl's v1 trainer fetches no
``responses`` for its advantage step, so an estimator that needs anchor states cannot run there.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rllm_plugins.anchors import anchor_ids
from rllm_plugins.outputs import as_advantages
from rllm_plugins.registry import get_estimator
from rllm_plugins.steps import StepBatch
from rllm_plugins.turns import Turns, find_turns, spread_to_tokens, turn_anchor_states, turn_rewards

from .reward_keys import REWARD_KEYS_ENV

__all__ = ["ANCHOR_STATES_KEY", "V1_RESPONSES_MESSAGE", "Episodes", "compute_rllm_step_advantage"]

ANCHOR_STATES_KEY = "anchor_states"  # non_tensor_batch[ANCHOR_STATES_KEY]: per row, one anchor state per turn (overrides responses)

V1_RESPONSES_MESSAGE = (
    "verl's v1 trainer (trainer.use_v1=true, the default) fetches no `responses` for its advantage step, so anchor states "
    "(the environment tokens before each turn) cannot be formed: set trainer.use_v1=false, or use a step-level estimator "
    "without anchor states (rllm_step_reinforce)"
)


def _anchor_states(where: str, index: np.ndarray, turns: Turns, responses: torch.Tensor | None, override: Any) -> list[Hashable]:
    """Each turn's anchor state: from ``override`` (one sequence of hashables per row, one per turn), else from ``responses``."""
    if override is not None:
        states: list[Hashable] = []
        per_row = turns.per_row.tolist()
        for row, row_states in enumerate(override):
            given = len(row_states) if isinstance(row_states, (list, tuple, np.ndarray)) else None
            if given != per_row[row]:
                raise ValueError(
                    f"{where}: row {row} (uid {index[row]!r}) has {per_row[row]} turns (runs of response_mask == 1) but "
                    f"non_tensor_batch[{ANCHOR_STATES_KEY!r}] gives {given if given is not None else type(row_states).__name__}; "
                    "give one anchor state per turn"
                )
            states.extend(row_states)
        return states
    if responses is None:
        raise ValueError(
            f"{where} needs `responses` to form anchor states, and the batch has none. {V1_RESPONSES_MESSAGE}. "
            f"(On the legacy trainer, check that {REWARD_KEYS_ENV} is not 0.)"
        )
    if tuple(responses.shape) != (turns.row_offsets.size - 1, turns.length):
        raise ValueError(
            f"{where}: responses has shape {tuple(responses.shape)} but response_mask {(turns.row_offsets.size - 1, turns.length)}; "
            "anchor states are read from the responses at the positions of the mask, so they must match"
        )
    return turn_anchor_states(_numpy(responses), turns)


def _numpy(x: torch.Tensor) -> np.ndarray:
    """On the CPU as numpy; 16-bit floats as float64 (bf16 has no numpy dtype, and turn sums need the width)."""
    x = x.detach().to("cpu")
    return x.double().numpy() if x.dtype in (torch.float16, torch.bfloat16) else x.numpy()


@dataclass(frozen=True)
class Episodes:
    """How a batch's rows form episodes (trajectories) in groups.

    ``rows`` (B,): every row once, in group, episode and output order; ``row_offsets`` (N + 1,): the
    rows of each episode within ``rows``; ``traj_offsets`` (G + 1,): the episodes of each group;
    ``final_rows`` (N,): the row whose total reward is each episode's outcome.
    """

    rows: np.ndarray
    row_offsets: np.ndarray
    traj_offsets: np.ndarray
    final_rows: np.ndarray

    @classmethod
    def one_row_each(cls, order: np.ndarray | None, offsets: np.ndarray, num_rows: int) -> Episodes:
        """Every row its own episode, grouped by uid (``order, offsets`` of :func:`rllm_verl.bridge.group_rows`)."""
        rows = np.arange(num_rows) if order is None else order
        return cls(rows, np.arange(num_rows + 1, dtype=np.int64), offsets, rows)


def compute_rllm_step_advantage(
    name: str,
    where: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    episodes: Episodes,
    options: dict[str, Any],
    config: Any,
    dtype: torch.dtype,
    responses: torch.Tensor | None = None,
    anchor_states: Any = None,
) -> torch.Tensor:
    """``(B, T)`` advantages in ``dtype`` of the step-level estimator ``name``; ``options`` are checked by the caller.

    The steps of an episode are the turns of its rows, in ``episodes.rows`` order. ``anchor_states``
    (B,), when given, overrides the anchors: row b's entry holds one hashable per turn of row b.
    """
    estimator = get_estimator(name)
    mask = _numpy(response_mask)
    turns = find_turns(mask)
    empty = np.flatnonzero(turns.per_row == 0)
    if empty.size:
        row = int(empty[0])
        raise ValueError(
            f"{where}: row {row} (uid {index[row]!r}) has no model token (response_mask all 0); a step-level estimator needs "
            "at least one turn per row: drop such rows before computing advantages"
        )
    step_rewards = turn_rewards(_numpy(token_level_rewards), turns)
    if not np.isfinite(step_rewards).all():
        j = int(np.flatnonzero(~np.isfinite(step_rewards))[0])
        row = int(turns.row[j])
        raise ValueError(
            f"{where}: row {row} (uid {index[row]!r}), turn {j - int(turns.row_offsets[row])} has reward {step_rewards[j]}; rewards must be finite"
        )
    row_totals = np.add.reduceat(step_rewards, turns.row_offsets[:-1])

    rows = episodes.rows
    counts = turns.per_row[rows]
    row_steps = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(counts, out=row_steps[1:])
    turn_order = np.repeat(turns.row_offsets[:-1][rows] - row_steps[:-1], counts) + np.arange(turns.num_turns)  # turns in episode order
    anchors, ordered_states = None, None
    if estimator.spec.needs_anchors:
        states = _anchor_states(where, index, turns, responses, anchor_states)
        group_of_row = np.empty(index.size, dtype=np.int64)
        episode_sizes = np.diff(episodes.row_offsets)
        group_of_row[rows] = np.repeat(np.repeat(np.arange(episodes.traj_offsets.size - 1), np.diff(episodes.traj_offsets)), episode_sizes)
        ordered_states = [states[j] for j in turn_order.tolist()]

        def place(s: int) -> str:
            j = int(turn_order[s])
            row = int(turns.row[j])
            return f"{where}: row {row} (uid {index[row]!r}), turn {j - int(turns.row_offsets[row])}"

        anchors = anchor_ids(ordered_states, group_of_row[turns.row[turn_order]], place)
    if "gamma" not in options and config is not None and config.get("gamma", None) is not None:
        options = {**options, "gamma": config.get("gamma")}
    batch = StepBatch(
        row_totals[episodes.final_rows], episodes.traj_offsets, step_rewards[turn_order], row_steps[episodes.row_offsets], anchors, ordered_states
    )
    grouped = as_advantages(estimator.batched_form(batch, **options), f"{where}: the estimator ({estimator.provider})")
    if grouped.size != turns.num_turns:
        raise ValueError(f"{where}: the estimator ({estimator.provider}) returned {grouped.size} advantages for {turns.num_turns} turns")
    per_turn = np.empty_like(grouped)
    per_turn[turn_order] = grouped
    if not np.isfinite(per_turn).all():
        j = int(np.flatnonzero(~np.isfinite(per_turn))[0])
        row = int(turns.row[j])
        turn = j - int(turns.row_offsets[row])
        raise ValueError(f"{where}: the estimator ({estimator.provider}) gave advantage {per_turn[j]} for row {row} (uid {index[row]!r}), turn {turn}")
    limit = float(torch.finfo(dtype).max)
    if np.abs(per_turn).max(initial=0.0) > limit:
        j = int(np.flatnonzero(np.abs(per_turn) > limit)[0])
        row = int(turns.row[j])
        raise ValueError(
            f"{where}: advantage {per_turn[j]} of row {row} (uid {index[row]!r}), turn {j - int(turns.row_offsets[row])} overflows {dtype} "
            f"(largest {limit:g}), the dtype of token_level_rewards; compute rewards in a wider dtype, or scale them down"
        )
    spread = spread_to_tokens(per_turn, turns, dtype=np.float64 if dtype == torch.float64 else np.float32)
    return torch.from_numpy(spread).to(device=token_level_rewards.device, dtype=dtype)
