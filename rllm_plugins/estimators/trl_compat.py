"""TRL's GRPO advantages by name, so a TRL user can reproduce ``GRPOTrainer``'s numbers.

``trl_grpo`` is TRL's ``scale_rewards="group"``: ``(r - mean_g) / (sample std_g + 1e-4)``;
a group with a single trajectory gets 0 (TRL's NaN std, then ``nan_to_num``).
``trl_grpo_batch`` is ``scale_rewards="batch"``: group mean, sample std of all the role's
rewards. ``norm_adv_by_std_in_grpo=False`` is ``scale_rewards="none"``: ``r - mean_g``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..segments import GroupLayout
from ..spec import list_form_of


def _centred(layout: GroupLayout, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = layout.mean(values)
    return values - layout.expand(mean), mean


def trl_grpo(values: np.ndarray, offsets: np.ndarray, /, *, norm_adv_by_std_in_grpo: bool = True, epsilon: float = 1e-4, **_: Any) -> np.ndarray:
    """TRL GRPO, scale_rewards="group": (r - group mean) / (group sample std + 1e-4); 0 for a group of 1."""
    layout = GroupLayout.from_offsets(offsets, len(values))
    centred, mean = _centred(layout, values)
    if not norm_adv_by_std_in_grpo:
        return centred
    std = layout.std(values, mean, ddof=1)
    centred /= layout.expand(std + epsilon)
    return np.nan_to_num(centred, nan=0.0, copy=False)


def trl_grpo_batch(values: np.ndarray, offsets: np.ndarray, /, *, norm_adv_by_std_in_grpo: bool = True, epsilon: float = 1e-4, **_: Any) -> np.ndarray:
    """TRL GRPO, scale_rewards="batch": (r - group mean) / (sample std of all rewards + 1e-4)."""
    layout = GroupLayout.from_offsets(offsets, len(values))
    centred, _ = _centred(layout, values)
    if not norm_adv_by_std_in_grpo or values.size <= 1:
        return centred
    std = GroupLayout.from_offsets([0, values.size], values.size).std(values, ddof=1)[0]
    centred /= std + epsilon
    return centred


calculate_trl_grpo_advantages = list_form_of(trl_grpo)
calculate_trl_grpo_advantages.__name__ = "calculate_trl_grpo_advantages"
calculate_trl_grpo_batch_advantages = list_form_of(trl_grpo_batch)
calculate_trl_grpo_batch_advantages.__name__ = "calculate_trl_grpo_batch_advantages"
