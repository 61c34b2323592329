"""prime-rl's length penalties: ``length_penalty`` (its GRPO and ``turn_credit`` form) and ``linear_length_penalty`` (the earlier one).

Both scale by the group's pass rate ``p`` (the mean of its task scores, ``scores``: the rewards where the path shapes none
before, verl's ``token_level_scores`` under ``use_kl_in_reward``): a group that solves nothing is not pushed shorter.
"""

from __future__ import annotations

import numpy as np

from ..segments import GroupLayout
from ._checks import flag, non_negative, positive_int

__all__ = ["length_penalty", "linear_length_penalty"]


def _group_mean(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Each unit's group mean of ``values`` ``(N,)``."""
    layout = GroupLayout.from_offsets(offsets, values.size)
    return np.repeat(layout.mean(values), np.diff(offsets))


def _fraction_of_group_max(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``values / max over the unit's group`` (a maximum of 0 read as 1)."""
    sizes = np.diff(offsets)
    if values.size == 0:
        return values
    maxima = np.maximum.reduceat(values, offsets[:-1][sizes > 0])
    return values / np.repeat(np.where(maxima > 0, maxima, 1.0), sizes[sizes > 0])


def length_penalty(
    rewards: np.ndarray,
    offsets: np.ndarray,
    lengths: np.ndarray,
    input_lengths: np.ndarray | None = None,
    tool_lengths: np.ndarray | None = None,
    turns: np.ndarray | None = None,
    scores: np.ndarray | None = None,
    *,
    output_weight: float = 0.25,
    input_weight: float = 0.1,
    turns_weight: float = 0.1,
) -> np.ndarray:
    """``-p * (w_out O/max O + w_in I/max I + w_turns T/max T)`` per unit ``(N,)``, the maxima over its group.

    ``O``: model tokens; ``I``: the tokens the model read but did not write (prompt plus tool responses); ``T``: turns;
    ``p``: the group's mean score (``scores``, else the rewards). A weight of 0 drops its fraction (and the need for its
    counts); where a path gives no tool tokens, ``I`` is the prompt's.
    """
    weights = {"output_weight": output_weight, "input_weight": input_weight, "turns_weight": turns_weight}
    w_out, w_in, w_turns = (non_negative(name, value) for name, value in weights.items())
    fraction = w_out * _fraction_of_group_max(np.asarray(lengths, dtype=np.float64), offsets)
    if w_in:
        if input_lengths is None:
            raise ValueError("input_weight > 0 reads each unit's prompt tokens, which this path does not provide; set input_weight=0")
        read = np.asarray(input_lengths, dtype=np.float64) + (0.0 if tool_lengths is None else np.asarray(tool_lengths, dtype=np.float64))
        fraction = fraction + w_in * _fraction_of_group_max(read, offsets)
    if w_turns:
        if turns is None:
            raise ValueError("turns_weight > 0 reads each unit's turns, which this path does not provide; set turns_weight=0")
        fraction = fraction + w_turns * _fraction_of_group_max(np.asarray(turns, dtype=np.float64), offsets)
    return -_group_mean(np.asarray(rewards if scores is None else scores, dtype=np.float64), offsets) * fraction


def linear_length_penalty(
    rewards: np.ndarray,
    offsets: np.ndarray,
    lengths: np.ndarray,
    scores: np.ndarray | None = None,
    *,
    max_length: int,
    coef: float = 0.25,
    gate_by_correctness: bool = False,
) -> np.ndarray:
    """``-coef * p * L / max_length`` per unit ``(N,)`` (``L`` model tokens, ``p`` the group's mean score); with
    ``gate_by_correctness`` times the unit's own score (a 0/1 score: only correct answers pay)."""
    max_length, coef, gated = positive_int("max_length", max_length), non_negative("coef", coef), flag("gate_by_correctness", gate_by_correctness)
    values = np.asarray(rewards if scores is None else scores, dtype=np.float64)
    term = -coef * _group_mean(values, offsets) * np.asarray(lengths, dtype=np.float64) / max_length
    return term * values if gated else term
