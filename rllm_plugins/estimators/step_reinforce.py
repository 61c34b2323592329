"""Step REINFORCE: each step's discounted return against its task group's steps, rLLM-native.

As ROLL's ``step_reinforce`` (alibaba/ROLL, ``roll/pipeline/agentic/utils.py``:
``compute_discounted_returns``, then ``grouped_reward_norm`` over the task group), per task group::

    G_{i,t} = r_{i,t} + gamma * G_{i,t+1}
    A_{i,t} = (G_{i,t} - mean_g G) / (std_g G + eps)      over every step of every trajectory of the group

Population std (ddof=0), eps 1e-6; a task group with a single step gets 0;
``norm_adv_by_std_in_grpo=False`` gives ``G - mean_g G``. ROLL takes torch's unbiased std and gives 0
to a whole group whose std is at most 1e-6; here an equal-returns group gets exactly 0 by the same
formula. No anchor states are needed: it is GiGPO's step part with the whole task group as one anchor group.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..anchors import normalize_within
from ..step_forms import step_list_form_of
from ..steps import StepBatch, discounted_returns
from .gigpo import check_discount

__all__ = ["calculate_step_reinforce_advantages", "check_step_reinforce_options", "step_reinforce"]


def check_step_reinforce_options(options: Any) -> None:
    """Config-time check: ``gamma`` in [0, 1]."""
    if "gamma" in options:
        check_discount("step_reinforce", options["gamma"])


def step_reinforce(batch: StepBatch, /, *, norm_adv_by_std_in_grpo: bool = True, epsilon: float = 1e-6, gamma: float = 1.0, **_: Any) -> np.ndarray:
    """Step REINFORCE: discounted step return minus its task group's mean over steps (divided by their std)."""
    batch.warn_if_steps_carry_nothing("step_reinforce")
    returns = discounted_returns(batch.step_rewards, batch.step_offsets, check_discount("step_reinforce", gamma))
    return normalize_within(returns, batch.step_group, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, epsilon=epsilon)


calculate_step_reinforce_advantages = step_list_form_of(step_reinforce, "calculate_step_reinforce_advantages")
