"""Pass@k GRPO (Chen et al., 2025, https://arxiv.org/abs/2503.19595), rLLM-native.

Only the best trajectory of each group is credited: ``A = (r_max - r_second) / (std_g + eps)``
(population std; ``r_max - r_second`` without normalisation), every other trajectory gets 0.
Ties go to the first best; a group of one gets 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..segments import GroupLayout
from ..spec import list_form_of
from .grpo import spread_divisor


def grpo_passk(values: np.ndarray, offsets: np.ndarray, /, *, norm_adv_by_std_in_grpo: bool = True, epsilon: float = 1e-6, **_: Any) -> np.ndarray:
    """Pass@k: (best - second best) / (group std + eps) for the best trajectory, 0 elsewhere."""
    layout = GroupLayout.from_offsets(offsets, len(values))
    out = np.zeros(values.size)
    if values.size == 0:
        return out
    best = layout.max(values)
    position = np.arange(values.size, dtype=np.float64)
    first_best = -layout.max(np.where(values == layout.expand(best), -position, -np.inf))
    nonempty = layout.sizes > 0
    winner = first_best[nonempty].astype(np.int64)
    rest = values.copy()
    rest[winner] = -np.inf
    second = layout.max(rest)
    gap = np.subtract(best, second, out=np.zeros(best.size), where=layout.sizes > 1)  # empty groups: no -inf - -inf
    if norm_adv_by_std_in_grpo:
        gap /= spread_divisor(np.nan_to_num(layout.std(values), nan=1.0), epsilon)
    out[winner] = gap[nonempty]
    return out


calculate_grpo_passk_advantages = list_form_of(grpo_passk, "calculate_grpo_passk_advantages")
