"""REINFORCE++ with a group baseline (Hu et al., 2025, https://arxiv.org/abs/2501.03262).

``c_i = r_i - b_g`` with ``b_g`` the group mean when the group has more than one trajectory,
else 0; then ``A_i = c_i / (std(c over the whole role) + eps)`` (population std, eps 1e-6,
no re-centring).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..segments import GroupLayout
from ..spec import list_form_of


def role_std(values: np.ndarray) -> float:
    """Population std of every value of the role (overflow-safe); 0 for no values."""
    if values.size == 0:
        return 0.0
    return float(GroupLayout.from_offsets([0, values.size], values.size).std(values)[0])


def reinforce_plus_plus_baseline(values: np.ndarray, offsets: np.ndarray, /, *, epsilon: float = 1e-6, **_: Any) -> np.ndarray:
    """REINFORCE++-baseline: (r - group mean, 0 for a group of 1) / (role std of that + eps)."""
    layout = GroupLayout.from_offsets(offsets, len(values))
    baseline = np.where(layout.sizes > 1, layout.mean(values), 0.0)
    centred = values - layout.expand(baseline)
    centred /= role_std(centred) + epsilon
    return centred


calculate_reinforce_plus_plus_baseline_advantages = list_form_of(
    reinforce_plus_plus_baseline, "calculate_reinforce_plus_plus_baseline_advantages", spec_args=("epsilon",), main_args=("epsilon",)
)
