"""RLOO (Ahmadian et al., 2024, https://arxiv.org/abs/2402.14740).

``A_i = r_i - mean_{j != i} r_j = n / (n - 1) * (r_i - mean_g)``; a group of one keeps its reward.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..segments import GroupLayout
from ..spec import AdvEstimatorSpec, list_form_of


def rloo(values: np.ndarray, offsets: np.ndarray, /, **_: Any) -> np.ndarray:
    """RLOO: n/(n-1) * (r - group mean), the leave-one-out baseline; a group of 1 keeps r."""
    layout = GroupLayout.from_offsets(offsets, len(values))
    n = layout.sizes.astype(np.float64)
    singles = layout.sizes <= 1
    mean = np.where(singles, 0.0, layout.mean(values))
    scale = np.where(singles, 1.0, n / np.maximum(n - 1.0, 1.0))
    advantages = values - layout.expand(mean)
    advantages *= layout.expand(scale)
    return advantages


calculate_rloo_advantages = list_form_of(rloo, "calculate_rloo_advantages")

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (AdvEstimatorSpec("rloo", calculate_rloo_advantages, rloo, options=()),)
