"""MaxRL (Tajwar et al., 2026, https://arxiv.org/abs/2602.02710): p-normalised group advantages.

``A_i = (r_i - mean_g) / |mean_g|``, and ``A_i = 0`` for every trajectory of a group with
``mean_g = 0``. For success indicators (rewards 0/1) ``mean_g`` is the group's success rate ``p``,
so a success gets ``(1 - p) / p`` and a failure ``-1``: the ``1 / p`` weighting of maximum
likelihood, which favours hard prompts (few successes) where GRPO's std scaling favours ``p = 1/2``.

The method is defined for rewards in ``[0, 1]`` (binary above all). Other rewards are computed
by the same formula: it is not shift-invariant (rewards ±1 give other numbers than 0/1), a
reward above the group mean always gets a positive advantage (the division is by ``|mean_g|``,
so a negative mean does not flip the sign), and a mean near 0 with rewards of mixed sign gives
very large advantages. Map success/failure rewards to 1/0 first. A group of one gets 0
(``r - mean = 0``); there is no std, so ``norm_adv_by_std_in_grpo`` does not apply. (The authors'
code divides by ``mean_g + 1e-6``, the same to relative 1e-6 on 0/1 rewards, and gives a group of
one mean 0, that is ``r / 1e-6``.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..segments import GroupLayout
from ..spec import AdvEstimatorSpec, list_form_of


def maxrl(values: np.ndarray, offsets: np.ndarray, /, **_: Any) -> np.ndarray:
    """MaxRL: (r - group mean) / |group mean|, 0 for a group whose mean is 0; meant for 0/1 rewards."""
    layout = GroupLayout.from_offsets(offsets, len(values))
    mean = layout.mean(values)
    scale = np.abs(mean)
    advantages = values - layout.expand(mean)
    advantages /= layout.expand(np.where(scale > 0, scale, np.inf))  # a zero mean: r / inf = 0
    return advantages


calculate_maxrl_advantages = list_form_of(maxrl, "calculate_maxrl_advantages")

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (AdvEstimatorSpec("maxrl", calculate_maxrl_advantages, maxrl, options=()),)
