"""TRL's GRPO advantages by name, so a TRL user can reproduce ``GRPOTrainer``'s numbers.

``trl_grpo`` follows TRL's ``scale_rewards`` (keyword ``scale_rewards``, default ``"group"``):

- ``"group"`` (or True): ``(r - mean_g) / (sample std_g + 1e-4)``; a group with a single
  trajectory gets 0 (TRL's NaN std, then ``nan_to_num``);
- ``"batch"``: group mean, sample std of all the role's rewards;
- ``"none"`` (or False, or ``norm_adv_by_std_in_grpo=False``): ``r - mean_g``.

``trl_grpo_batch`` is ``"batch"``; any other ``scale_rewards`` given to it is an error.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..scaled import scaled_standardize, unit_scale_retry
from ..segments import GroupLayout
from ..spec import AdvEstimatorSpec, list_form_of
from .grpo import spread_divisor

SCALE_REWARDS = ("group", "batch", "none")


def trl_scaling(scale_rewards: Any = "group", norm_adv_by_std_in_grpo: bool = True) -> str:
    """TRL's ``scale_rewards`` as ``"group"``, ``"batch"`` or ``"none"`` (True -> group, False -> none).

    ``norm_adv_by_std_in_grpo=False`` means ``"none"``; with ``scale_rewards="batch"`` the two
    contradict each other and a ``ValueError`` says so.
    """
    mode = ("group" if scale_rewards else "none") if isinstance(scale_rewards, (bool, np.bool_)) else scale_rewards
    if not isinstance(mode, str) or mode not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards must be 'group', 'batch', 'none', True or False, got {scale_rewards!r}")
    if not norm_adv_by_std_in_grpo:
        if mode == "batch":
            raise ValueError(
                "scale_rewards='batch' divides by the batch std but norm_adv_by_std_in_grpo=False asks for no scaling: "
                "set scale_rewards='none' for unscaled advantages, or norm_adv_by_std_in_grpo=True"
            )
        return "none"
    return mode


def _centred(layout: GroupLayout, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = layout.mean(values)
    with np.errstate(over="ignore"):  # a deviation beyond the range stays inf, refused where the advantages are checked
        return values - layout.expand(mean), mean


def trl_grpo(
    values: np.ndarray, offsets: np.ndarray, /, *, scale_rewards: Any = "group", norm_adv_by_std_in_grpo: bool = True, epsilon: float = 1e-4, **_: Any
) -> np.ndarray:
    """TRL GRPO with TRL's scale_rewards: (r - group mean) / (group or batch sample std + 1e-4), or r - group mean."""
    mode = trl_scaling(scale_rewards, norm_adv_by_std_in_grpo)
    if mode == "batch":
        return trl_grpo_batch(values, offsets, scale_rewards=mode, epsilon=epsilon)
    layout = GroupLayout.from_offsets(offsets, len(values))
    centred, mean = _centred(layout, values)
    if mode == "none":
        return centred
    std = layout.std(values, mean, ddof=1)
    with np.errstate(over="ignore", invalid="ignore"):
        centred /= layout.expand(spread_divisor(std, epsilon))
    if not np.isfinite(centred[layout.expand(layout.sizes > 1)]).all() and np.isfinite(values).all():  # a deviation beyond the range
        return scaled_standardize(layout, values, epsilon=epsilon, ddof=1, single="zero")
    return np.nan_to_num(centred, nan=0.0, copy=False)


def trl_grpo_batch(
    values: np.ndarray, offsets: np.ndarray, /, *, scale_rewards: Any = "batch", norm_adv_by_std_in_grpo: bool = True, epsilon: float = 1e-4, **_: Any
) -> np.ndarray:
    """TRL GRPO, scale_rewards="batch": (r - group mean) / (sample std of all rewards + 1e-4)."""
    if trl_scaling(scale_rewards) != "batch":
        raise ValueError(f"trl_grpo_batch scales by the batch std, but scale_rewards={scale_rewards!r}: choose trl_grpo, which follows scale_rewards")
    layout = GroupLayout.from_offsets(offsets, len(values))
    if not norm_adv_by_std_in_grpo or values.size <= 1:
        return _centred(layout, values)[0]

    def batch_scaled(values: np.ndarray, epsilon: float) -> np.ndarray:
        centred, _ = _centred(layout, values)
        centred /= spread_divisor(GroupLayout.from_offsets([0, values.size], values.size).std(values, ddof=1)[0], epsilon)
        return centred

    return unit_scale_retry(batch_scaled, values, epsilon)  # magnitudes near the float64 range: taken again scaled


calculate_trl_grpo_advantages = list_form_of(trl_grpo, "calculate_trl_grpo_advantages")
calculate_trl_grpo_batch_advantages = list_form_of(trl_grpo_batch, "calculate_trl_grpo_batch_advantages")

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (
    AdvEstimatorSpec("trl_grpo", calculate_trl_grpo_advantages, trl_grpo, options=()),
    AdvEstimatorSpec("trl_grpo_batch", calculate_trl_grpo_batch_advantages, trl_grpo_batch, options=()),
)
