"""OPO (Hao et al., 2025, https://arxiv.org/abs/2505.23585): length-weighted group baseline.

``b_g = sum_i l_i r_i / sum_i l_i`` over the group's response lengths ``l``; ``A_i = r_i - b_g``.
A group of one has baseline 0. Needs ``lengths`` (N,), which the list form derives from
``traj_groups`` (total ``response_ids`` per trajectory) and the adapters from the response mask.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..segments import GroupLayout
from ..spec import AdvEstimatorSpec, list_form_of


def opo(values: np.ndarray, offsets: np.ndarray, /, *, lengths: np.ndarray | None = None, **_: Any) -> np.ndarray:
    """OPO: r - length-weighted group mean of r (0 for a group of 1); needs response `lengths`."""
    layout = GroupLayout.from_offsets(offsets, len(values))
    if lengths is None:
        raise ValueError("estimator 'opo' needs the response length of every trajectory: pass lengths=(N,) or traj_groups with response_ids")
    lengths = np.asarray(lengths, dtype=np.float64)
    if lengths.shape != values.shape:
        raise ValueError(f"estimator 'opo': lengths has shape {lengths.shape}, rewards have {values.shape}")
    total = layout.sum(lengths)
    with np.errstate(divide="ignore", invalid="ignore"):
        weighted = np.where(total > 0, layout.sum(lengths * values) / total, 0.0)
    baseline = np.where(layout.sizes > 1, weighted, 0.0)
    return values - layout.expand(baseline)


calculate_opo_advantages = list_form_of(opo, "calculate_opo_advantages")

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (AdvEstimatorSpec("opo", calculate_opo_advantages, opo, options=()),)
