"""Dr. GRPO (Liu et al., 2025, https://arxiv.org/abs/2503.20783): GRPO without the std.

``A_i = r_i - mean_g``, whatever ``norm_adv_by_std_in_grpo`` says: the name states the
choice, so a config reads ``dr_grpo`` instead of ``grpo`` with ``norm_adv_by_std_in_grpo=False``
(the two give the same numbers). A group of one uses mean 0, so ``A = r``, as ``grpo`` does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..segments import GroupLayout
from ..spec import AdvEstimatorSpec, list_form_of


def dr_grpo(values: np.ndarray, offsets: np.ndarray, /, **_: Any) -> np.ndarray:
    """Dr. GRPO: r - group mean (no std); a group of 1 keeps r."""
    layout = GroupLayout.from_offsets(offsets, len(values))
    mean = np.where(layout.sizes > 1, layout.mean(values), 0.0)
    return values - layout.expand(mean)


calculate_dr_grpo_advantages = list_form_of(dr_grpo, "calculate_dr_grpo_advantages")

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (AdvEstimatorSpec("dr_grpo", calculate_dr_grpo_advantages, dr_grpo, options=()),)
