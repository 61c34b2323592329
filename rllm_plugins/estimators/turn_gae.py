"""Turn GAE: generalised advantage estimation (Schulman et al., 2016, https://arxiv.org/abs/1506.02438) over turns.

Per trajectory of ``T`` steps (turns), with step rewards ``r_t`` and a critic's values ``V_t`` of each step's state
(``StepBatch.step_values``; ``V_T = 0`` after the last turn)::

    delta_t = r_t + gamma * V_{t+1} - V_t
    A_t     = sum_k (gamma * lam)^k * delta_{t+k}          (A_t = delta_t + gamma * lam * A_{t+1})
    R_t     = A_t + V_t                                    the returns: the critic's targets

``whiten`` (default True) then whitens the advantages over the batch as verl's ``gae`` does
(``masked_whiten``): ``(A - mean) / sqrt(var + 1e-8)`` with mean and unbiased variance over model tokens,
each step counting its ``step_tokens`` (every step once when the batch has none). The returns are not
whitened. ``lam = 1`` gives the return-to-go minus the value; ``V = 0`` and ``lam = 1`` the discounted
return. Unlike verl's token-level ``gae``, which runs one recursion over every response token (tool tokens
included, ``gamma`` and ``lam`` applied once per model token), a turn is one step of the recursion.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..calling import is_plain_real
from ..scaled import power_of_two_scale
from ..spec import AdvEstimatorSpec
from ..steps.batch import StepBatch, discounted_sums
from ..steps.forms import step_list_form_of
from .step_options import check_discount

__all__ = ["SPECS", "calculate_turn_gae_advantages", "check_turn_gae_options", "turn_gae", "turn_gae_returns", "whiten_over_tokens"]

WHITEN_EPS = 1e-8  # verl's masked_whiten: (x - mean) * rsqrt(var + 1e-8)


def check_turn_gae_options(options: Mapping[str, Any]) -> None:
    """Config-time check of turn_gae's options beyond their types: gamma and lam in [0, 1], whiten a bool."""
    if "gamma" in options:
        check_discount("turn_gae", options["gamma"])
    lam = options.get("lam", 1.0)
    if not is_plain_real(lam) or not 0.0 <= float(lam) <= 1.0:
        raise ValueError(f"estimator 'turn_gae': lam (GAE's lambda) must be a number in [0, 1], got {type(lam).__name__} {lam!r}")
    whiten = options.get("whiten", True)
    if not isinstance(whiten, (bool, np.bool_)):
        raise ValueError(f"estimator 'turn_gae': whiten must be a bool (True or False), got {type(whiten).__name__} {whiten!r}")


def turn_gae_returns(step_rewards: np.ndarray, values: np.ndarray, step_offsets: np.ndarray, gamma: float, lam: float) -> np.ndarray:
    """``(S,)`` GAE advantages ``A_t`` of every step (float64), within each trajectory of ``step_offsets`` ``(N + 1,)``.

    Vectorised over trajectories (:func:`~rllm_plugins.steps.batch.discounted_sums` of the TD errors, factor
    ``gamma * lam``): one pass per distance from a trajectory's end, in the order of the plain backward loop.
    """
    rewards = np.asarray(step_rewards, dtype=np.float64)
    size = rewards.size
    if size == 0:
        return np.zeros(0)
    step_offsets = np.asarray(step_offsets)
    last = np.zeros(size, dtype=bool)
    last[step_offsets[1:][np.diff(step_offsets) > 0] - 1] = True  # a trajectory's last step: V after it is 0
    following = np.zeros(size)
    following[:-1] = values[1:]
    following[last] = 0.0
    deltas = rewards + gamma * following - values
    return discounted_sums(deltas, step_offsets, gamma * lam)


def whiten_over_tokens(advantages: np.ndarray, tokens: np.ndarray | None) -> np.ndarray:
    """``(A - mean) / sqrt(var + 1e-8)`` with each step weighted by its tokens ``(S,)`` (None: 1 each), unbiased variance
    over the total weight (verl's ``masked_whiten``); a total weight of at most 1 leaves nothing to compare: 0."""
    weights = np.ones_like(advantages) if tokens is None else tokens
    total = float(weights.sum())
    if total <= 1.0:
        return np.zeros_like(advantages)
    with np.errstate(over="ignore", invalid="ignore"):
        mean = _weighted_sum(weights, advantages) / total
        centred = advantages - mean
        var = _weighted_sum(weights, centred * centred) / total * total / (total - 1.0)
    if math.isfinite(var) and math.isfinite(mean):
        return centred / np.sqrt(var + WHITEN_EPS)
    # magnitudes whose square overflows (from about 1e154): the same formula on values divided by a power of two
    # near the largest (exact), the epsilon divided by its square
    scale = float(power_of_two_scale(np.abs(advantages).max()))
    scaled = advantages / scale
    mean = _weighted_sum(weights, scaled) / total
    centred = scaled - mean
    var = _weighted_sum(weights, centred * centred) / total * total / (total - 1.0)
    return centred / np.sqrt(var + WHITEN_EPS / scale / scale)


def _weighted_sum(weights: np.ndarray, values: np.ndarray) -> float:
    """``sum(weights * values)`` ``(S,)`` by numpy's pairwise summation: the same bits on any machine, and no BLAS call
    (BLAS's ``dot`` splits a long sum across its threads, which wait on each other when the cores are busy)."""
    return float(np.add.reduce(weights * values))


def turn_gae(
    batch: StepBatch,
    /,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
    whiten: bool = True,
    **_: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """Turn GAE: per-turn TD errors of the critic's values, summed with weight (gamma * lam)^k -> (advantages, returns) ``(S,)``."""
    check_turn_gae_options({"gamma": gamma, "lam": lam, "whiten": whiten})
    if batch.step_values is None:
        raise ValueError(
            "estimator 'turn_gae' needs a critic's value for every step (StepBatch.step_values): Step.value in the core, "
            "the critic's values in verl (critic.enable=true)"
        )
    advantages = turn_gae_returns(batch.step_rewards, batch.step_values, batch.step_offsets, float(gamma), float(lam))
    returns = advantages + batch.step_values
    if whiten and advantages.size:
        advantages = whiten_over_tokens(advantages, batch.step_tokens)
    return advantages, returns


calculate_turn_gae_advantages = step_list_form_of(turn_gae, "calculate_turn_gae_advantages", with_returns=True)

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (
    AdvEstimatorSpec("turn_gae", calculate_turn_gae_advantages, turn_gae, options=(), level="step", needs_values=True, check_options=check_turn_gae_options),
)
