"""Pass@k GRPO (Chen et al., 2025, https://arxiv.org/abs/2503.19595), rLLM-native.

Only the best trajectory of each group is credited: ``A = (r_max - r_second) / (std_g + eps)``
(population std; ``r_max - r_second`` without normalisation), every other trajectory gets 0.
Ties go to the first best; a group of one gets 0; a group of two or more holding NaN gets NaN at one of its rows (the run refuses NaN rewards first).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..segments import GroupLayout, row_top_two
from ..spec import AdvEstimatorSpec, list_form_of
from .grpo import spread_divisor


def _best_gaps(values: np.ndarray, layout: GroupLayout) -> tuple[np.ndarray, np.ndarray]:
    """Each group's best minus its second best ``(G,)`` (0 for groups of one or none), and the position in ``values`` of each non-empty group's first best."""
    if layout.uniform_size is not None:  # equal groups: per row of the (G, k) view, no (N,) temporary
        best, second, column = row_top_two(values.reshape(-1, layout.uniform_size))
        winner = layout.offsets[:-1] + column
    else:
        best = layout.max(values)
        position = np.arange(values.size, dtype=np.float64)
        first_best = -layout.max(np.where(values == layout.expand(best), -position, -np.inf))
        unordered = np.isnan(best)  # a group holding NaN has no best: its gap (NaN) goes to its first row
        first_best[unordered] = layout.offsets[:-1][unordered]
        winner = first_best[layout.sizes > 0].astype(np.int64)
        rest = values.copy()
        rest[winner] = -np.inf
        second = layout.max(rest)
    gap = np.subtract(best, second, out=np.zeros(best.size), where=layout.sizes > 1)  # empty groups: no -inf - -inf
    gap += 0.0  # a tie's gap is +0.0, whichever zero numpy's min/max keep for 0.0 against -0.0 (-0.0 - 0.0 would be -0.0)
    return gap, winner


def grpo_passk(values: np.ndarray, offsets: np.ndarray, /, *, norm_adv_by_std_in_grpo: bool = True, epsilon: float = 1e-6, **_: Any) -> np.ndarray:
    """Pass@k: (best - second best) / (group std + eps) for the best trajectory, 0 elsewhere."""
    layout = GroupLayout.from_offsets(offsets, len(values))
    if values.size == 0:
        return np.zeros(0)
    gap, winner = _best_gaps(values, layout)
    if norm_adv_by_std_in_grpo:
        gap /= spread_divisor(np.nan_to_num(layout.std(values), nan=1.0), epsilon)
    out = np.zeros(values.size)  # allocated last: it can take the memory the std's temporaries left
    out[winner] = gap if layout.uniform_size is not None else gap[layout.sizes > 0]
    return out


calculate_grpo_passk_advantages = list_form_of(grpo_passk, "calculate_grpo_passk_advantages")

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (AdvEstimatorSpec("grpo_passk", calculate_grpo_passk_advantages, grpo_passk, options=()),)
