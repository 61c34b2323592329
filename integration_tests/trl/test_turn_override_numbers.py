"""A ``rollout_func``'s ``turn_rewards`` entry beyond the float64 range is a ValueError naming the completion and turn."""

from __future__ import annotations

import numpy as np
import pytest
from rllm_trl.turns import local_turns, row_turns, step_advantages


def test_a_huge_int_turn_reward_names_the_completion_and_the_turn():
    ids = np.array([[5, 6, 7, 8]] * 2)
    completion = np.ones((2, 4), dtype=np.int64)
    tool = np.array([[1, 0, 1, 1]] * 2)  # two turns per completion
    turns = local_turns(completion, tool)
    rows = row_turns(ids, completion, turns, [{}, {"turn_rewards": [0.0, 10**400]}], with_anchors=True, prompt_ids=np.ones((2, 2)), prompt_mask=np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"completion 1 of the gathered batch \(group 0\), turn 1: turn_rewards entry must be a finite number, got int 1000"):
        step_advantages(rows, np.ones(2), 2, "gigpo", {})
