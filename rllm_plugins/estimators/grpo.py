"""GRPO (Shao et al., 2024, https://arxiv.org/abs/2402.03300), rLLM-native.

``A_i = (r_i - mean_g) / (std_g + eps)``; ``std_g`` is the population std (ddof=0), eps 1e-6.
``norm_adv_by_std_in_grpo=False`` gives ``r_i - mean_g`` (Dr. GRPO). A group of one trajectory
uses mean 0 and std 1, so its advantage is ``r / (1 + eps)`` (or ``r``). With ``epsilon=0`` a group
without spread (equal rewards) gets 0, not 0 / 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..scaled import scaled_standardize
from ..segments import GroupLayout
from ..spec import AdvEstimatorSpec, list_form_of


def spread_divisor(std: np.ndarray | float, epsilon: float) -> np.ndarray:
    """``std + epsilon`` as a divisor: 0 (a group without spread, epsilon 0) becomes inf, so that 0 / 0 gives advantage 0."""
    divisor = np.asarray(std, dtype=np.float64) + epsilon
    return divisor if epsilon > 0 else np.where(divisor > 0, divisor, np.inf)


def standardize_in_groups(values: np.ndarray, offsets: np.ndarray, *, norm_adv_by_std_in_grpo: bool, epsilon: float, ddof: int) -> np.ndarray:
    """(r - group mean) / (group std + eps), the std with ``ddof``; a group of 1 uses mean 0, std 1. ``values`` (N,) float64.

    Where a deviation overflows (magnitudes near the float64 range), the groups are standardised scaled (:mod:`rllm_plugins.scaled`).
    """
    layout = GroupLayout.from_offsets(offsets, len(values))
    mean = layout.mean(values)
    singles = layout.sizes <= 1
    with np.errstate(over="ignore"):
        centred = values - layout.expand(np.where(singles, 0.0, mean))
    if not norm_adv_by_std_in_grpo:
        return centred
    std = np.where(singles, 1.0, layout.std(values, mean, ddof=ddof))
    with np.errstate(invalid="ignore"):  # inf / inf where a deviation and the std overflow: taken again scaled below
        centred /= layout.expand(spread_divisor(std, epsilon))  # in place: one (N,) temporary less
    if not np.isfinite(centred).all() and np.isfinite(values).all():
        return scaled_standardize(layout, values, epsilon=epsilon, ddof=ddof, single="unit")
    return centred


def grpo(values: np.ndarray, offsets: np.ndarray, /, *, norm_adv_by_std_in_grpo: bool = True, epsilon: float = 1e-6, **_: Any) -> np.ndarray:
    """GRPO: (r - group mean) / (group population std + eps); a group of 1 uses mean 0, std 1."""
    return standardize_in_groups(values, offsets, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, epsilon=epsilon, ddof=0)


calculate_grpo_advantages = list_form_of(grpo, "calculate_grpo_advantages", spec_args=("norm_adv_by_std_in_grpo", "episilon"))

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (AdvEstimatorSpec("grpo", calculate_grpo_advantages, grpo, options=()),)
