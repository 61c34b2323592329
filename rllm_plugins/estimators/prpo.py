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
from ..segments import GroupLayout, check_offsets
from ..spec import AdvEstimatorSpec, list_form_of
from .grpo import spread_divisor


def _role_z(values: np.ndarray, offsets: np.ndarray, epsilon: float, divide: bool) -> np.ndarray:
    check_offsets(offsets, len(values))  # the groups are validated, not described: one statistic over the role
    if values.size == 0:
        return np.zeros(0)
    if divide:
        out, finite = _role_standardized(values, epsilon)
        if finite:  # a finite mean and sum of squares and eps >= 0 give finite advantages: nothing to scan
            return out
        # magnitudes near the float64 range: taken again scaled (rllm_plugins.scaled)
        return unit_scale_retry(lambda v, e: _role_standardized(v, e)[0], values, epsilon, first=out)
    with np.errstate(over="ignore"):  # a deviation beyond the range stays inf, refused where the advantages are checked
        return values - GroupLayout.from_offsets([0, values.size], values.size).mean(values)[0]


def _role_standardized(values: np.ndarray, epsilon: float) -> tuple[np.ndarray, bool]:
    """``(v - role mean) / (role population std + eps)`` ``(N,)``, the numbers of :meth:`GroupLayout.mean` and
    :meth:`GroupLayout.std` on one group, and whether every advantage is known finite without looking.

    The output is written once and divided in place; re-centred only where the mean's correction pass moved the mean
    (else it already holds ``v - mean``). Beyond the float64 range, those overflow-safe methods themselves. A finite
    mean and sum of squares bound every deviation, and ``eps >= 0`` keeps the divisor positive or inf
    (:func:`~rllm_plugins.estimators.grpo.spread_divisor`): then each advantage is finite (at most ``sqrt(N)``).
    """
    n = values.size
    role = GroupLayout.from_offsets([0, n], n)
    with np.errstate(over="ignore", invalid="ignore"):
        first = role.sum(values)[0] / n
        centred = values - first
        mean = first + role.sum(centred)[0] / n  # the mean's correction pass
        if mean != first:
            np.subtract(values, mean, out=centred)
        squares = float(role.sum_of_squares(centred)[0])
        finite = math.isfinite(squares) and math.isfinite(float(mean))
        if finite:
            std = float(np.sqrt(squares / n))
        else:
            mean = role.mean(values)
            np.subtract(values, mean[0], out=centred)
            std = float(role.std(values, mean)[0])
        centred /= spread_divisor(std, epsilon)
    return centred, finite and epsilon >= 0


def prpo(values: np.ndarray, offsets: np.ndarray, /, *, epsilon: float = 1e-6, **_: Any) -> np.ndarray:
    """PRPO: (r - role mean) / (role population std + eps), always (``norm_adv_by_std_in_grpo`` does not apply)."""
    return _role_z(values, offsets, epsilon, divide=True)


def prpo_std_optional(values: np.ndarray, offsets: np.ndarray, /, *, norm_adv_by_std_in_grpo: bool = True, epsilon: float = 1e-6, **_: Any) -> np.ndarray:
    """PRPO whose std division follows ``norm_adv_by_std_in_grpo`` (False: r - role mean)."""
    return _role_z(values, offsets, epsilon, divide=bool(norm_adv_by_std_in_grpo))


calculate_prpo_advantages = list_form_of(prpo, "calculate_prpo_advantages", main_args=("epsilon",))
calculate_prpo_std_optional_advantages = list_form_of(prpo_std_optional, "calculate_prpo_std_optional_advantages", main_args=("epsilon",))

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (
    AdvEstimatorSpec("prpo", calculate_prpo_advantages, prpo, options=()),
    AdvEstimatorSpec("prpo_std_optional", calculate_prpo_std_optional_advantages, prpo_std_optional, options=()),
)
