"""Pass@k Training with the analytical advantage (Chen et al., 2025, https://arxiv.org/abs/2508.10751).

The reward of a group is pass@k: a random ``k``-subset of the group's ``n`` trajectories
succeeds if any member does. With ``n_neg`` failures among ``n`` (a success is a reward
``> 0``) and ``P = C(n_neg, k) / C(n, k)`` the chance that a ``k``-subset has no success::

    mean_g = 1 - P,   std_g = sqrt(P (1 - P))
    A_pos = P / (std_g + eps)                                   (= (1 - mean_g) / std_g)
    A_neg = (P - C(n_neg - 1, k - 1) / C(n - 1, k - 1)) / (std_g + eps)
          = -P * (n_pos / n_neg) / (std_g + eps)

eps = 1e-6 as in the authors' code; ``norm_adv_by_std_in_grpo=False`` drops the division. The
option ``k`` (an int >= 1, default 1) is checked at each call and, with :func:`check_passk_k`,
against the configured group size at config time. A group with fewer than ``k`` trajectories (say
TRL's group after unscorable completions are left out) has no ``k``-subset and gets 0, as ``k = n`` does. ``k = 1`` is GRPO
on 0/1 rewards (population std, eps 1e-6); ``k = n`` gives 0 everywhere (a single ``k``-subset,
no spread), so useful values are ``1 < k < n``. A group of one (``k = 1``) gets 0, as does every
group whose trajectories all succeed or all fail, or with fewer than ``k`` failures.

Unlike ``grpo_passk`` (verl's pass@k GRPO, arXiv 2503.19595: the max-of-the-group objective,
that is ``k = n``, in the family Walder & Karkhanis's PKPO generalises to any ``k``), which
credits only the best trajectory of each group with ``(r_max - r_second) / std`` and gives every
other one 0, this estimator gives every trajectory an advantage: every success the same positive
one, every failure the same negative one, both set by ``k``. It reads rewards as pass/fail.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..segments import GroupLayout
from ..spec import AdvEstimatorSpec, list_form_of
from .grpo import spread_divisor

__all__ = ["SPECS", "calculate_passk_training_advantages", "check_passk_k", "passk_training"]


def check_passk_k(k: object, group_size: int | None = None) -> int:
    """Validate the option ``k`` (and, given the configured ``group_size``, ``k < group_size``); return it as int."""
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, numbers.Integral):
        raise ValueError(f"estimator 'passk_training': k must be an int (the k of pass@k), got {type(k).__name__} {k!r}")
    k = int(k)
    if k < 1:
        raise ValueError(f"estimator 'passk_training': k must be at least 1, got {k}")
    if group_size is not None and k > group_size:
        raise ValueError(
            f"estimator 'passk_training': k={k} is larger than the group size {group_size} (trajectories per prompt); "
            f"pass@k needs at least k trajectories per group: choose k < {group_size} or sample more trajectories per prompt"
        )
    if group_size is not None and k == group_size > 1:
        raise ValueError(
            f"estimator 'passk_training': k={k} equals the group size, which gives advantage 0 to every trajectory "
            f"(a group has a single k-subset); choose k < {group_size} or sample more trajectories per prompt"
        )
    return k


def check_passk_group_size(options: Mapping[str, Any], group_size: int) -> int:
    """The spec's config-time check: option ``k`` (default 1) must be below the configured group size."""
    return check_passk_k(options.get("k", 1), group_size)


def _no_success_chance(n: np.ndarray, failures: np.ndarray, k: int) -> np.ndarray:
    """``C(failures, k) / C(n, k)`` per group, as the product of ``(failures - j) / (n - j)`` over ``j < k`` (a loop over k, not groups).

    The factor at ``j = failures`` is 0, so the loop stops after the largest group (a huge ``k`` costs nothing more).
    """
    chance = np.ones(n.shape)
    for j in range(min(k, int(n.max(initial=0.0)) + 1)):
        chance *= np.maximum(failures - j, 0.0) / np.maximum(n - j, 1.0)  # n - j >= 1 in every group of k or more
    return chance


def passk_training(
    values: np.ndarray, offsets: np.ndarray, /, *, k: int = 1, norm_adv_by_std_in_grpo: bool = True, epsilon: float = 1e-6, **_: Any
) -> np.ndarray:
    """Pass@k Training (option k): analytical pass@k advantage, one value for every success, one for every failure."""
    layout = GroupLayout.from_offsets(offsets, len(values))
    k = check_passk_k(k)
    success = values > 0
    n = layout.sizes.astype(np.float64)
    successes = layout.sum(success.astype(np.float64))
    failures = n - successes
    chance = _no_success_chance(n, failures, k)
    negative = -chance * np.divide(successes, failures, out=np.zeros_like(n), where=failures > 0)
    if norm_adv_by_std_in_grpo:
        scale = spread_divisor(np.sqrt(chance * (1.0 - chance)), epsilon)
        chance = chance / scale
        negative = negative / scale
    if k > 1 and (layout.sizes < k).any():  # fewer than k trajectories (unscorable ones left out): no k-subset, 0
        small = layout.sizes < k
        chance[small], negative[small] = 0.0, 0.0
    if layout.uniform_size is not None:  # equal groups: pick per row without expanding both values to (N,)
        rows = success.reshape(-1, layout.uniform_size)
        return np.where(rows, chance[:, None], negative[:, None]).reshape(-1)
    return np.where(success, layout.expand(chance), layout.expand(negative))


calculate_passk_training_advantages = list_form_of(passk_training, "calculate_passk_training_advantages")

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (
    AdvEstimatorSpec("passk_training", calculate_passk_training_advantages, passk_training, options=(), check_group_size=check_passk_group_size),
)
