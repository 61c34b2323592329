"""PRPO: a role-level z-score, ``A_i = (r_i - mean_role) / (std_role + eps)``, exactly as rLLM defines it.

Every trajectory of the role shares one baseline and one scale (population std, eps 1e-6),
whatever its group. Like rLLM's ``calculate_prpo_advantages``, ``prpo`` always divides by the
std: ``norm_adv_by_std_in_grpo`` does not apply. ``prpo_std_optional`` is the variant that
honours it (``False`` gives ``r_i - mean_role``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..scaled import unit_scale_retry
from ..segments import GroupLayout
from ..spec import list_form_of
from .grpo import spread_divisor


def _role_z(values: np.ndarray, offsets: np.ndarray, epsilon: float, divide: bool) -> np.ndarray:
    GroupLayout.from_offsets(offsets, len(values))
    if values.size == 0:
        return np.zeros(0)
    if divide:  # magnitudes near the float64 range: taken again scaled (rllm_plugins.scaled)
        return unit_scale_retry(_role_standardized, values, epsilon)
    with np.errstate(over="ignore"):  # a deviation beyond the range stays inf, refused where the advantages are checked
        return values - GroupLayout.from_offsets([0, values.size], values.size).mean(values)[0]


def _role_standardized(values: np.ndarray, epsilon: float) -> np.ndarray:
    """``(v - role mean) / (role population std + eps)`` ``(N,)``, the numbers of :meth:`GroupLayout.mean` and
    :meth:`GroupLayout.std` on one group: the output is written once, re-centred and divided in place; beyond the
    float64 range those overflow-safe methods themselves."""
    n = values.size
    role = GroupLayout.from_offsets([0, n], n)
    with np.errstate(over="ignore", invalid="ignore"):
        mean = role.sum(values)[0] / n
        centred = values - mean
        mean += role.sum(centred)[0] / n  # the mean's correction pass
        np.subtract(values, mean, out=centred)
        squares = float(role.sum_of_squares(centred)[0])
    if not (math.isfinite(squares) and math.isfinite(float(mean))):
        mean = role.mean(values)
        np.subtract(values, mean[0], out=centred)
        std = float(role.std(values, mean)[0])
    else:
        std = float(np.sqrt(squares / n))
    centred /= spread_divisor(std, epsilon)
    return centred


def prpo(values: np.ndarray, offsets: np.ndarray, /, *, epsilon: float = 1e-6, **_: Any) -> np.ndarray:
    """PRPO: (r - role mean) / (role population std + eps), always (``norm_adv_by_std_in_grpo`` does not apply)."""
    return _role_z(values, offsets, epsilon, divide=True)


def prpo_std_optional(values: np.ndarray, offsets: np.ndarray, /, *, norm_adv_by_std_in_grpo: bool = True, epsilon: float = 1e-6, **_: Any) -> np.ndarray:
    """PRPO whose std division follows ``norm_adv_by_std_in_grpo`` (False: r - role mean)."""
    return _role_z(values, offsets, epsilon, divide=bool(norm_adv_by_std_in_grpo))


calculate_prpo_advantages = list_form_of(prpo, "calculate_prpo_advantages", main_args=("epsilon",))
calculate_prpo_std_optional_advantages = list_form_of(prpo_std_optional, "calculate_prpo_std_optional_advantages", main_args=("epsilon",))
