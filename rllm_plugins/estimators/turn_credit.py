"""Turn credit: progress between scored states, smeared back over the turns that led to it (prime-rl PR #3282), rLLM-native.

The environment scores the state after each turn; per trajectory ``i`` with turns ``t = 1..T_i``::

    d_t   = phi_t - phi_prev(t)       phi_prev(t): the last scored turn before t; 0 for the first scored turn and every unscored one
    P_i   = sum_t d_t                 net progress (= last score - first score)
    c_t   = sum_{u >= t} gamma^(u-t) d_u / Z_u,   Z_u = sum_{k=0}^{u-1} gamma^k      (turn u's progress spread over turns 1..u, weights sum to 1)
    A_i   = (R_i + P_i) - mean_g (R + P)                                          (the group-relative level; no std)
    a_t   = A_i + beta * (c_t - cbar_i)

``cbar_i`` is the mean of ``c`` over the trajectory's turns (``center="turns"``, the default), or weighted by each
turn's model tokens (``center="tokens"``, prime-rl's choice), so the shift sums to zero over the trajectory's turns
(or tokens). An unscored turn (score None or missing) gets no delta: its progress lands on the next scored turn.
A trajectory with no scored turn trains on ``A_i`` alone; a task group of one has ``A = 0``.

Where the scores come from: ``Step.metadata["turn_score"]`` when some step of the role's batch carries that key (the
collector, and the list form given ``traj_groups``; a step without it, or with None, is unscored); otherwise each turn's
reward is its score, every turn scored: ``Step.reward`` in the core (with the collector's rule that a trajectory whose
steps carry no reward has its outcome on its last step), and on the verl and TRL step paths the per-turn rewards
(verl: ``token_level_rewards`` summed over the turn; TRL: the rollout's ``turn_rewards``), where a NaN marks an
unscored turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..calling import describe, is_finite_real
from ..spec import AdvEstimatorSpec
from ..steps.batch import StepBatch, discounted_returns
from ..steps.forms import step_list_form_of
from .step_options import check_choice, check_discount

__all__ = ["SPECS", "SCORE_KEY", "calculate_turn_credit_advantages", "check_turn_credit_options", "smear", "turn_credit", "turn_deltas"]

SCORE_KEY = "turn_score"  # Step.metadata[SCORE_KEY]: the score of the state after the turn (None: unscored)
CENTERS = ("turns", "tokens")


def check_turn_credit_options(options: Mapping[str, Any]) -> None:
    """Config-time check of turn_credit's options: ``gamma`` in [0, 1], ``beta`` finite, ``center`` a choice."""
    if "gamma" in options:
        check_discount("turn_credit", options["gamma"])
    check_choice("turn_credit", options, "center", CENTERS)
    if "beta" in options and not is_finite_real(options["beta"]):
        raise ValueError(f"estimator 'turn_credit': beta (the weight of the turn credit) must be a finite number, got {describe(options['beta'])}")


def _scores_from_groups(traj_groups: Sequence[Any], size: int) -> np.ndarray | None:
    """``(S,)`` float64 of ``Step.metadata["turn_score"]`` in step order, NaN where None or missing; None when no step has the key."""
    steps = (step for group in traj_groups for traj in group.trajectories for step in traj.steps)
    if not any(isinstance(step.metadata, Mapping) and SCORE_KEY in step.metadata for step in steps):
        return None
    out = np.full(size, np.nan)
    s = 0
    for g, group in enumerate(traj_groups):
        for i, traj in enumerate(group.trajectories):
            for t, step in enumerate(traj.steps):
                score = step.metadata.get(SCORE_KEY) if isinstance(step.metadata, Mapping) else None
                if score is not None:
                    if isinstance(score, bool) or not is_finite_real(score):
                        raise ValueError(
                            f"estimator 'turn_credit': group {g} (group_id {group.group_id!r}), trajectory {i}, step {t}: "
                            f"metadata[{SCORE_KEY!r}] must be a finite number or None, got {describe(score)}"
                        )
                    out[s] = float(score)
                s += 1
    return out


def turn_deltas(scores: np.ndarray, step_offsets: np.ndarray) -> np.ndarray:
    """``(S,)`` per-turn progress: a scored turn's score minus the last scored one before it in its trajectory, else 0 (NaN: unscored)."""
    size = scores.size
    scored = ~np.isnan(scores)
    last = np.maximum.accumulate(np.where(scored, np.arange(size), -1)) if size else np.zeros(0, dtype=np.int64)
    previous = np.concatenate([[-1], last[:-1]]) if size else last
    starts = np.repeat(step_offsets[:-1], np.diff(step_offsets))
    has_previous = scored & (previous >= starts)
    out = np.zeros(size)
    out[has_previous] = scores[has_previous] - scores[previous[has_previous]]
    return out


def smear(progress: np.ndarray, step_offsets: np.ndarray, gamma: float) -> np.ndarray:
    """``(S,)`` credit: turn u's progress split over turns 1..u with weights ``gamma^(u-t) / Z_u`` (sum 1); one backward pass."""
    position = np.arange(progress.size) - np.repeat(step_offsets[:-1], np.diff(step_offsets)) + 1  # 1-based turn number
    norm = position.astype(np.float64) if gamma == 1.0 else (1.0 - gamma ** position.astype(np.float64)) / (1.0 - gamma)
    return discounted_returns(progress / norm, step_offsets, gamma)


def turn_credit(
    batch: StepBatch,
    /,
    *,
    gamma: float = 1.0,
    beta: float = 1.0,
    center: str = "turns",
    traj_groups: Sequence[Any] | None = None,
    **_: Any,
) -> np.ndarray:
    """Turn credit: the group-relative level of outcome plus net progress, plus ``beta`` times each turn's centred credit; ``(S,)``."""
    check_turn_credit_options({"gamma": gamma, "beta": beta, "center": center})
    steps = batch.num_steps
    scores = _scores_from_groups(traj_groups, steps) if traj_groups is not None else None
    if scores is None:  # no step carries a turn score: the step rewards are the scores (every turn scored)
        scores = np.array(batch.step_rewards, dtype=np.float64)
    progress = turn_deltas(scores, batch.step_offsets)
    credit = smear(progress, batch.step_offsets, float(gamma))
    sizes = np.diff(batch.step_offsets)
    net = np.add.reduceat(progress, batch.step_offsets[:-1]) if steps else np.zeros(batch.outcomes.size)
    returns = batch.outcomes + net
    group_sizes = np.diff(batch.traj_offsets)
    group_of = np.repeat(np.arange(group_sizes.size), group_sizes)
    level = returns - (np.bincount(group_of, returns, minlength=group_sizes.size) / np.maximum(group_sizes, 1))[group_of]
    if center == "tokens":
        if traj_groups is not None:
            weights = np.array([len(s.response_ids) for g in traj_groups for t in g.trajectories for s in t.steps], dtype=np.float64)
        else:
            weights = batch.step_tokens if batch.step_tokens is not None else np.ones(steps)
    else:
        weights = np.ones(steps)
    traj_of = np.repeat(np.arange(sizes.size), sizes)
    total = np.bincount(traj_of, weights, minlength=sizes.size)
    cbar = np.bincount(traj_of, weights * credit, minlength=sizes.size) / np.where(total > 0, total, 1.0)
    return level[traj_of] + beta * (credit - cbar[traj_of])


calculate_turn_credit_advantages = step_list_form_of(turn_credit, "calculate_turn_credit_advantages")

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (
    AdvEstimatorSpec(
        "turn_credit",
        calculate_turn_credit_advantages,
        turn_credit,
        options=(),
        level="step",
        check_options=check_turn_credit_options,
    ),
)
