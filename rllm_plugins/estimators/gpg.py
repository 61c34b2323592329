"""GPG, Group Policy Gradient (Chu et al., 2025, https://arxiv.org/abs/2504.02546), as verl computes it.

``A_i = alpha * (r_i - mean_g) / f_norm`` with the batch-level factor
``alpha = N / max(M, 1)``: ``N`` trajectories in the role, ``M`` of them with a non-zero reward
(the inverse share of non-zero-reward samples, which scales the gradient back up when many
samples carry no reward). ``f_norm`` defaults to 1 and there is no std (``norm_adv_by_std_in_grpo``
does not apply). A group of one uses mean 0 (``A = alpha * r``), as verl's ``gpg``; equal to
verl's ``gpg`` when the role is verl's batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..calling import as_finite_real, short_repr
from ..segments import GroupLayout
from ..spec import AdvEstimatorSpec, list_form_of


def gpg(values: np.ndarray, offsets: np.ndarray, /, *, f_norm: float = 1.0, **_: Any) -> np.ndarray:
    """GPG: N / max(#non-zero rewards, 1) * (r - group mean, 0 for a group of 1) / f_norm."""
    layout = GroupLayout.from_offsets(offsets, len(values))
    if isinstance(f_norm, (bool, np.bool_)) or as_finite_real(f_norm) is None or f_norm == 0:
        raise ValueError(f"estimator 'gpg': f_norm must be a finite non-zero number, got {short_repr(f_norm)}")
    alpha = values.size / max(np.count_nonzero(values), 1)
    mean = np.where(layout.sizes > 1, layout.mean(values), 0.0)
    advantages = values - layout.expand(mean)
    advantages *= alpha / f_norm
    return advantages


calculate_gpg_advantages = list_form_of(gpg, "calculate_gpg_advantages")

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (AdvEstimatorSpec("gpg", calculate_gpg_advantages, gpg, options=()),)
