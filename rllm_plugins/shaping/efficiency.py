"""``efficiency_bonus``: prime-rl's success-gated shaping: the group's best answers earn a bonus for costing less than their mean."""

from __future__ import annotations

from typing import Literal

import numpy as np

from ._checks import non_negative

__all__ = ["efficiency_bonus"]


def efficiency_bonus(
    rewards: np.ndarray,
    offsets: np.ndarray,
    lengths: np.ndarray,
    tool_lengths: np.ndarray | None = None,
    turns: np.ndarray | None = None,
    scores: np.ndarray | None = None,
    *,
    cost: Literal["tokens", "turns"] = "tokens",
    completion_weight: float = 1.0,
    tool_response_weight: float = 1.0,
) -> np.ndarray:
    """``r * clip(1 - c / mean_c, 0, 1)`` for a unit that ties its group's best score ``r`` (> 0), else 0 ``(N,)``.

    ``r``: ``scores`` (else the rewards); ``c``: the unit's cost (``cost="tokens"``: ``completion_weight`` x model tokens +
    ``tool_response_weight`` x tool tokens, which count 0 where the path gives none, as prime-rl's where a rollout has no such
    metric; ``"turns"``: its turns); ``mean_c``: the mean cost of the group's best units (no bonus where it is 0).
    """
    w_model, w_tool = non_negative("completion_weight", completion_weight), non_negative("tool_response_weight", tool_response_weight)
    values = np.asarray(rewards if scores is None else scores, dtype=np.float64)
    if cost == "tokens":
        costs = w_model * np.asarray(lengths, dtype=np.float64)
        if w_tool and tool_lengths is not None:
            costs = costs + w_tool * np.asarray(tool_lengths, dtype=np.float64)
    elif cost == "turns":
        if turns is None:
            raise ValueError("cost='turns' reads each unit's turns, which this path does not provide; use cost='tokens'")
        costs = np.asarray(turns, dtype=np.float64)
    else:
        raise ValueError(f"cost must be 'tokens' or 'turns', got {cost!r}")
    sizes = np.diff(offsets)
    group_of = np.repeat(np.arange(sizes.size), sizes)
    best = np.full(sizes.size, -np.inf)
    np.maximum.at(best, group_of, values)
    correct = (values >= best[group_of]) & (best[group_of] > 0)
    count = np.bincount(group_of, weights=correct, minlength=sizes.size)
    mean_cost = np.bincount(group_of, weights=np.where(correct, costs, 0.0), minlength=sizes.size) / np.maximum(count, 1)
    unit_mean = mean_cost[group_of]
    bonus = np.where(unit_mean > 0, np.clip(1.0 - costs / np.where(unit_mean > 0, unit_mean, 1.0), 0.0, 1.0), 0.0)
    return values * bonus * correct
