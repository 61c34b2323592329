"""REINFORCE++ with a group baseline (Hu et al., 2025, https://arxiv.org/abs/2501.03262).

``c_i = r_i - b_g`` with ``b_g`` the group mean when the group has more than one trajectory,
else 0; then ``c`` is whitened over the whole role: ``A_i = (c_i - mean(c)) / (std(c) + eps)``
(population std, eps 1e-6). Without groups of one ``mean(c)`` is 0, so only the scale changes
the centred values; with them the result stays bounded (a role of singletons with equal rewards
gets 0, not ``r / eps``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..scaled import unit_scale_retry
from ..segments import GroupLayout
from ..spec import AdvEstimatorSpec, list_form_of
from .grpo import spread_divisor


def whiten(values: np.ndarray, epsilon: float) -> np.ndarray:
    """``(values - mean) / (population std + epsilon)`` over all of ``values`` (overflow-safe), in place."""
    if values.size == 0:
        return values
    whole = GroupLayout.from_offsets([0, values.size], values.size)
    mean = whole.mean(values)
    std = float(whole.std(values, mean)[0])
    values -= mean[0]
    values /= spread_divisor(std, epsilon)
    return values


def reinforce_plus_plus_baseline(values: np.ndarray, offsets: np.ndarray, /, *, epsilon: float = 1e-6, **_: Any) -> np.ndarray:
    """REINFORCE++-baseline: r - group mean (0 for a group of 1), whitened over the role."""
    layout = GroupLayout.from_offsets(offsets, len(values))

    def centred_and_whitened(values: np.ndarray, epsilon: float) -> np.ndarray:
        baseline = np.where(layout.sizes > 1, layout.mean(values), 0.0)
        return whiten(values - layout.expand(baseline), epsilon)

    return unit_scale_retry(centred_and_whitened, values, epsilon)  # magnitudes near the float64 range: taken again scaled


calculate_reinforce_plus_plus_baseline_advantages = list_form_of(
    reinforce_plus_plus_baseline, "calculate_reinforce_plus_plus_baseline_advantages", spec_args=("epsilon",), main_args=("epsilon",)
)

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (
    AdvEstimatorSpec("reinforce_plus_plus_baseline", calculate_reinforce_plus_plus_baseline_advantages, reinforce_plus_plus_baseline, options=()),
)
