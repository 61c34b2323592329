"""REINFORCE (Williams, 1992): the advantage is the trajectory reward, no baseline."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..segments import GroupLayout
from ..spec import AdvEstimatorSpec, list_form_of


def reinforce(values: np.ndarray, offsets: np.ndarray, /, **_: Any) -> np.ndarray:
    """REINFORCE: advantage = reward (no baseline)."""
    GroupLayout.from_offsets(offsets, len(values))
    return np.array(values, dtype=np.float64)


calculate_reinforce_advantages = list_form_of(reinforce, "calculate_reinforce_advantages")

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (AdvEstimatorSpec("reinforce", calculate_reinforce_advantages, reinforce, options=()),)
