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

from typing import Any

import numpy as np
import torch

from rllm_plugins.anchors import anchor_ids
from rllm_plugins.outputs import as_advantages
from rllm_plugins.registry import get_estimator
from rllm_plugins.steps import StepBatch
from rllm_plugins.turns import find_turns, spread_to_tokens, turn_anchor_states, turn_rewards

from .reward_keys import REWARD_KEYS_ENV

__all__ = ["V1_RESPONSES_MESSAGE", "compute_rllm_step_advantage"]

V1_RESPONSES_MESSAGE = (
    "verl's v1 trainer (trainer.use_v1=true, the default) fetches no `responses` for its advantage step, so anchor states "
    "(the environment tokens before each turn) cannot be formed: set trainer.use_v1=false, or use a step-level estimator "
    "without anchor states (rllm_step_reinforce)"
)


def _numpy(x: torch.Tensor) -> np.ndarray:
    """On the CPU as numpy; 16-bit floats as float64 (bf16 has no numpy dtype, and turn sums need the width)."""
    x = x.detach().to("cpu")
    return x.double().numpy() if x.dtype in (torch.float16, torch.bfloat16) else x.numpy()


def compute_rllm_step_advantage(
    name: str,
    where: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    grouping: tuple[np.ndarray | None, np.ndarray],
    options: dict[str, Any],
    config: Any,
    dtype: torch.dtype,
    responses: torch.Tensor | None = None,
) -> torch.Tensor:
    """``(B, T)`` advantages in ``dtype`` of the step-level estimator ``name``.

    ``grouping`` is the rows' ``(order, offsets)`` by uid (:func:`rllm_verl.bridge.group_rows`); ``options`` are checked by the caller.
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
    outcomes = np.add.reduceat(step_rewards, turns.row_offsets[:-1])

    order, offsets = grouping
    rows = np.arange(index.size) if order is None else order
    counts = turns.per_row[rows]
    step_offsets = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(counts, out=step_offsets[1:])
    turn_order = np.repeat(turns.row_offsets[:-1][rows] - step_offsets[:-1], counts) + np.arange(turns.num_turns)  # turns in group order
    anchors = None
    if estimator.spec.needs_anchors:
        if responses is None:
            raise ValueError(
                f"{where} needs `responses` to form anchor states, and the batch has none. {V1_RESPONSES_MESSAGE}. "
                f"(On the legacy trainer, check that {REWARD_KEYS_ENV} is not 0.)"
            )
        states = turn_anchor_states(_numpy(responses), turns)
        group_of_row = np.empty(index.size, dtype=np.int64)
        group_of_row[rows] = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
        ordered_states = [states[j] for j in turn_order.tolist()]
        ordered_groups = group_of_row[turns.row[turn_order]].tolist()
        anchors = anchor_ids(ordered_states, ordered_groups, lambda s: f"{where}: turn {s}")
    if "gamma" not in options and config is not None and config.get("gamma", None) is not None:
        options = {**options, "gamma": config.get("gamma")}
    batch = StepBatch(outcomes[rows], offsets, step_rewards[turn_order], step_offsets, anchors)
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
