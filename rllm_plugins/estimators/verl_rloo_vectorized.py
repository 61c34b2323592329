"""verl's ``rloo_vectorized`` by name (``compute_rloo_vectorized_outcome_advantage`` of verl 0.9).

``A_i = n / (n - 1) * (r_i - mean_g) = r_i - mean_{j != i} r_j`` (leave-one-out baseline), and
a group of one gets **0**. That last rule is the only difference from ``rloo`` (rLLM's and
verl's ``rloo``), where a group of one keeps its reward.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..segments import GroupLayout
from ..spec import AdvEstimatorSpec, list_form_of


def verl_rloo_vectorized(values: np.ndarray, offsets: np.ndarray, /, **_: Any) -> np.ndarray:
    """verl's rloo_vectorized: n/(n-1) * (r - group mean); 0 for a group of 1."""
    layout = GroupLayout.from_offsets(offsets, len(values))
    n = layout.sizes.astype(np.float64)
    scale = np.where(n > 1, n / np.maximum(n - 1.0, 1.0), 0.0)
    advantages = values - layout.expand(layout.mean(values))
    advantages *= layout.expand(scale)
    return advantages


calculate_verl_rloo_vectorized_advantages = list_form_of(verl_rloo_vectorized, "calculate_verl_rloo_vectorized_advantages")

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (AdvEstimatorSpec("verl_rloo_vectorized", calculate_verl_rloo_vectorized_advantages, verl_rloo_vectorized, options=()),)
