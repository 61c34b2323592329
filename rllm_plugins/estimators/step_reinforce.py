"""Step REINFORCE: each step's discounted return against its task group's steps, rLLM-native.

As ROLL's ``step_reinforce`` (alibaba/ROLL, ``roll/pipeline/agentic/utils.py``:
``compute_discounted_returns``, then ``grouped_reward_norm`` over the task group), per task group::

    G_{i,t} = r_{i,t} + gamma * G_{i,t+1}
    A_{i,t} = (G_{i,t} - mean_g G) / (std_g G + eps)      over every step of every trajectory of the group

Population std (ddof=0), eps 1e-6; a task group with a single step gets 0;
``norm_adv_by_std_in_grpo=False`` gives ``G - mean_g G``. No anchor states are needed: it is GiGPO's
step part with the whole task group as one anchor group.

ROLL's ``reward_normalization`` settings are options: ``grouping="batch"`` (every step of the role in one
population), ``std_ddof=1`` (torch's unbiased std) and ``min_std=1e-6`` (a population whose std is at most
``min_std`` gets 0), and the two choices of ROLL HEAD, ``norm_mean_type`` and ``norm_std_type``, each
``"group"`` (the population's statistic), ``"batch"`` (over every step of the role, whatever the grouping) or
None (no centring; no division)::

    with a std type:     A = (G - mean) / (std + eps), 0 in a population of one step and where std <= min_std
    without a std type:  A = G - mean

``method`` is the shorthand of ROLL 6f5b8f7: ``"mean_std"`` (the default: both ``"group"``), ``"mean"`` (mean
``"group"``, no std), ``"identity"`` (neither) and ``"asym_clip"`` (``mean_std`` clipped to [-1, 3], as at
6f5b8f7; at HEAD ``asym_clip`` no longer clips). A type left unset follows ``method``; a type that contradicts
a ``method`` given with it is a ``ValueError``. ROLL's ``mean_std`` is ``std_ddof=1, min_std=1e-6``; its
sokoban example (group mean, batch std) is ``norm_std_type="batch", std_ddof=1, min_std=1e-6``.
``norm_adv_by_std_in_grpo=False`` drops the division.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..calling import describe, is_finite_real
from ..scaled import power_of_two_scale
from ..spec import AdvEstimatorSpec
from ..steps.anchors import normalize_within
from ..steps.batch import StepBatch, discounted_returns
from ..steps.forms import step_list_form_of
from .grpo import spread_divisor
from .step_options import check_choice, check_discount, check_std_ddof

__all__ = ["SPECS", "AS_METHOD", "calculate_step_reinforce_advantages", "check_step_reinforce_options", "norm_types", "step_reinforce"]

GROUPINGS = ("task_group", "batch")
METHODS = ("mean_std", "mean", "identity", "asym_clip")
ASYM_CLIP = (-1.0, 3.0)  # ROLL 6f5b8f7's clamp(min=-1, max=3)
NORM_TYPES = ("group", "batch", None)  # ROLL HEAD's norm_mean_type / norm_std_type
METHOD_TYPES = {"mean_std": ("group", "group"), "mean": ("group", None), "identity": (None, None), "asym_clip": ("group", "group")}


class _AsMethod:
    """The default of ``norm_mean_type`` / ``norm_std_type``: what ``method`` says (None is a value of its own: no statistic)."""

    def __repr__(self) -> str:
        return "AS_METHOD"


AS_METHOD: Any = _AsMethod()


def norm_types(options: Mapping[str, Any]) -> tuple[str, str | None, str | None]:
    """``(method, norm_mean_type, norm_std_type)`` the options resolve to; ``ValueError`` for a choice outside ROLL's or a contradiction."""
    method = options.get("method")
    check_choice("step_reinforce", {"method": method} if method is not None else {}, "method", METHODS)
    implied = METHOD_TYPES[method or "mean_std"]
    resolved = []
    for key, implied_type in zip(("norm_mean_type", "norm_std_type"), implied, strict=True):
        given = options.get(key, AS_METHOD)
        if given is AS_METHOD:
            resolved.append(implied_type)
            continue
        if given not in NORM_TYPES:
            raise ValueError(f"estimator 'step_reinforce': {key} must be one of {list(NORM_TYPES)} (ROLL's choices), got {given!r}")
        if method is not None and given != implied_type:
            raise ValueError(
                f"estimator 'step_reinforce': method={method!r} means {key}={implied_type!r}, but {key}={given!r} is given; "
                f"set either method or {key}, not both"
            )
        resolved.append(given)
    return method or "mean_std", resolved[0], resolved[1]


def check_step_reinforce_options(options: Mapping[str, Any]) -> None:
    """Config-time check of step_reinforce's options beyond their types: ranges and choices."""
    if "gamma" in options:
        check_discount("step_reinforce", options["gamma"])
    check_choice("step_reinforce", options, "grouping", GROUPINGS)
    norm_types(options)
    check_std_ddof("step_reinforce", options)
    min_std = options.get("min_std")
    if min_std is not None and (not is_finite_real(min_std) or min_std < 0):
        raise ValueError(f"estimator 'step_reinforce': min_std must be None or a finite number >= 0 (ROLL: 1e-6), got {describe(min_std)}")


def step_reinforce(
    batch: StepBatch,
    /,
    *,
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
    gamma: float = 1.0,
    grouping: str = "task_group",
    method: str | None = None,
    norm_mean_type: str | None = AS_METHOD,
    norm_std_type: str | None = AS_METHOD,
    std_ddof: int = 0,
    min_std: float | None = None,
    **_: Any,
) -> np.ndarray:
    """Step REINFORCE: discounted step return minus its population's mean over steps (divided by their std)."""
    options = {"gamma": gamma, "grouping": grouping, "std_ddof": std_ddof, "min_std": min_std, "method": method}
    check_step_reinforce_options({**options, "norm_mean_type": norm_mean_type, "norm_std_type": norm_std_type})
    method, mean_type, std_type = norm_types({"method": method, "norm_mean_type": norm_mean_type, "norm_std_type": norm_std_type})
    batch.warn_if_steps_carry_nothing("step_reinforce")
    returns = discounted_returns(batch.step_rewards, batch.step_offsets, gamma)
    if mean_type is None and std_type is None:
        return returns
    ids = batch.step_group if grouping == "task_group" else np.zeros(batch.num_steps, dtype=np.int64)
    scaled = norm_adv_by_std_in_grpo and std_type is not None
    if (mean_type, std_type) in (("group", "group"), ("group", None)):  # the population's own statistics
        out = normalize_within(returns, ids, norm_adv_by_std_in_grpo=scaled, epsilon=epsilon, ddof=std_ddof)
    else:
        out = _mixed(returns, ids, mean_type, std_type if scaled else None, epsilon, std_ddof)
    if scaled and min_std is not None and out.size:
        out[_spread(returns, ids, std_type, std_ddof) <= min_std] = 0.0
    if scaled and method == "asym_clip":
        np.clip(out, *ASYM_CLIP, out=out)
    return out


def _spread(returns: np.ndarray, ids: np.ndarray, of: str | None, ddof: int) -> np.ndarray:
    """``(S,)`` the std (``ddof``) of each step's population (``of="group"``) or of every step (``"batch"``), around its own mean.

    Where the sums or squares overflow (returns near the float64 range), taken on returns divided by a power of two.
    """
    if of == "batch":
        ids = np.zeros_like(ids)
    counts = np.bincount(ids)

    def std_of(x: np.ndarray) -> np.ndarray:
        mean = np.bincount(ids, x) / np.maximum(counts, 1)
        centred = x - mean[ids]
        return np.sqrt(np.bincount(ids, centred * centred) / np.maximum(counts - ddof, 1))

    with np.errstate(over="ignore", invalid="ignore"):
        std = std_of(returns)
    if returns.size and not np.isfinite(std).all() and np.isfinite(returns).all():
        scale = float(power_of_two_scale(np.abs(returns).max()))
        std = scale * std_of(returns / scale)
    return std[ids]


def _mixed(returns: np.ndarray, ids: np.ndarray, mean_type: str | None, std_type: str | None, epsilon: float, ddof: int) -> np.ndarray:
    """ROLL HEAD's normalisation for the pairs other than the population's own mean (and std): a mean of the population,
    the batch or 0, divided by the population's or the batch's std (a population of one step gets 0 when divided)."""
    if mean_type == "group":
        counts = np.bincount(ids)
        centre = (np.bincount(ids, returns) / np.maximum(counts, 1))[ids]
    else:
        centre = np.full(returns.size, float(returns.mean()) if mean_type == "batch" and returns.size else 0.0)
    out = returns - centre
    if std_type is not None:
        out /= spread_divisor(_spread(returns, ids, std_type, ddof), epsilon)
        out[(np.bincount(ids) <= 1)[ids]] = 0.0
    return out


calculate_step_reinforce_advantages = step_list_form_of(step_reinforce, "calculate_step_reinforce_advantages")

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (
    AdvEstimatorSpec(
        "step_reinforce", calculate_step_reinforce_advantages, step_reinforce, options=(), level="step", check_options=check_step_reinforce_options
    ),
)
