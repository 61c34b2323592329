"""verl's GRPO by name (``compute_grpo_outcome_advantage`` of verl 0.9), so a TRL or rLLM user can reproduce verl's numbers.

``A_i = (r_i - mean_g) / (std_sample_g + eps)`` with the sample std (ddof=1) and eps 1e-6;
``norm_adv_by_std_in_grpo=False`` gives ``r_i - mean_g``. A group of one uses mean 0 and std 1,
so ``A = r / (1 + eps)`` (``r`` without the std), exactly as verl's ``grpo`` and
``grpo_vectorized``. rLLM's ``grpo`` differs only in the population std (ddof=0).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..spec import AdvEstimatorSpec, list_form_of
from .grpo import standardize_in_groups


def verl_grpo(values: np.ndarray, offsets: np.ndarray, /, *, norm_adv_by_std_in_grpo: bool = True, epsilon: float = 1e-6, **_: Any) -> np.ndarray:
    """verl's GRPO: (r - group mean) / (group sample std + eps); a group of 1 uses mean 0, std 1."""
    return standardize_in_groups(values, offsets, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, epsilon=epsilon, ddof=1)


calculate_verl_grpo_advantages = list_form_of(verl_grpo, "calculate_verl_grpo_advantages")

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (AdvEstimatorSpec("verl_grpo", calculate_verl_grpo_advantages, verl_grpo, options=()),)
