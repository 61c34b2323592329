"""PRPO: a role-level z-score, ``A_i = (r_i - mean_role) / (std_role + eps)``.

Every trajectory of the role shares one baseline and one scale (population std, eps 1e-6),
whatever its group; ``norm_adv_by_std_in_grpo=False`` gives ``r_i - mean_role``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..segments import GroupLayout
from ..spec import list_form_of


def prpo(values: np.ndarray, offsets: np.ndarray, /, *, norm_adv_by_std_in_grpo: bool = True, epsilon: float = 1e-6, **_: Any) -> np.ndarray:
    """PRPO: (r - role mean) / (role population std + eps)."""
    GroupLayout.from_offsets(offsets, len(values))
    if values.size == 0:
        return np.zeros(0)
    role = GroupLayout.from_offsets([0, values.size], values.size)
    mean = role.mean(values)
    centred = values - mean[0]
    if not norm_adv_by_std_in_grpo:
        return centred
    centred /= float(role.std(values, mean)[0]) + epsilon  # the role std, reusing the mean
    return centred


calculate_prpo_advantages = list_form_of(prpo)
calculate_prpo_advantages.__name__ = "calculate_prpo_advantages"
