"""Step REINFORCE: each step's discounted return against its task group's steps, rLLM-native.

As ROLL's ``step_reinforce`` (alibaba/ROLL, ``roll/pipeline/agentic/utils.py``:
``compute_discounted_returns``, then ``grouped_reward_norm`` over the task group), per task group::

    G_{i,t} = r_{i,t} + gamma * G_{i,t+1}
    A_{i,t} = (G_{i,t} - mean_g G) / (std_g G + eps)      over every step of every trajectory of the group

Population std (ddof=0), eps 1e-6; a task group with a single step gets 0;
``norm_adv_by_std_in_grpo=False`` gives ``G - mean_g G``. No anchor states are needed: it is GiGPO's
step part with the whole task group as one anchor group.

ROLL's ``reward_normalization`` settings are options: ``grouping="batch"`` (every step of the role in one
population), ``method`` ``"mean"`` (``G - mean``), ``"identity"`` (``G``) or ``"asym_clip"`` (``mean_std``
clipped to [-1, 3]), ``std_ddof=1`` (torch's unbiased std) and ``min_std=1e-6`` (a population whose std is
at most ``min_std`` gets 0). ROLL's ``mean_std`` is ``std_ddof=1, min_std=1e-6``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..calling import describe, is_finite_real
from ..segments import GroupLayout
from ..steps.anchors import normalize_within
from ..steps.batch import StepBatch, discounted_returns
from ..steps.forms import step_list_form_of
from .gigpo import check_choice, check_discount

__all__ = ["calculate_step_reinforce_advantages", "check_step_reinforce_options", "step_reinforce"]

GROUPINGS = ("task_group", "batch")
METHODS = ("mean_std", "mean", "identity", "asym_clip")
ASYM_CLIP = (-1.0, 3.0)  # ROLL's clamp(min=-1, max=3)


def check_step_reinforce_options(options: Mapping[str, Any]) -> None:
    """Config-time check of step_reinforce's options beyond their types: ranges and choices."""
    if "gamma" in options:
        check_discount("step_reinforce", options["gamma"])
    check_choice("step_reinforce", options, "grouping", GROUPINGS)
    check_choice("step_reinforce", options, "method", METHODS)
    if "std_ddof" in options and (isinstance(options["std_ddof"], bool) or options["std_ddof"] not in (0, 1)):
        raise ValueError(f"estimator 'step_reinforce': std_ddof must be 0 (population std) or 1 (unbiased std), got {options['std_ddof']!r}")
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
    method: str = "mean_std",
    std_ddof: int = 0,
    min_std: float | None = None,
    **_: Any,
) -> np.ndarray:
    """Step REINFORCE: discounted step return minus its population's mean over steps (divided by their std)."""
    check_step_reinforce_options({"gamma": gamma, "grouping": grouping, "method": method, "std_ddof": std_ddof, "min_std": min_std})
    batch.warn_if_steps_carry_nothing("step_reinforce")
    returns = discounted_returns(batch.step_rewards, batch.step_offsets, gamma)
    if method == "identity":
        return returns
    ids = batch.step_group if grouping == "task_group" else np.zeros(batch.num_steps, dtype=np.int64)
    scaled = norm_adv_by_std_in_grpo and method != "mean"
    out = normalize_within(returns, ids, norm_adv_by_std_in_grpo=scaled, epsilon=epsilon, ddof=std_ddof)
    if scaled and min_std is not None and out.size:
        offsets = batch.group_step_offsets if grouping == "task_group" else np.array([0, batch.num_steps])
        population = GroupLayout.from_offsets(offsets, batch.num_steps)
        std = population.std(returns, ddof=std_ddof)  # overflow-safe; NaN for a population of one, whose advantage is 0 already
        out[population.expand(std <= min_std)] = 0.0
    if scaled and method == "asym_clip":
        np.clip(out, *ASYM_CLIP, out=out)
    return out


calculate_step_reinforce_advantages = step_list_form_of(step_reinforce, "calculate_step_reinforce_advantages")
