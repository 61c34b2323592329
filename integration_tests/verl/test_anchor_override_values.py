"""verl's ``non_tensor_batch["anchor_states"]``: None is no state (refused, as in the core), NaN refused, tensors grouped by value."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

CONFIG = OmegaConf.create({"adv_estimator": "rllm_gigpo", "gamma": 1.0, "norm_adv_by_std_in_grpo": True})


def one_turn_rows(states: list[object]) -> DataProto:
    """Four rows of one uid, one model turn each (rewards 1, 0, 0, 0 on the last token), with one anchor override per row."""
    rows = len(states)
    mask = torch.ones(rows, 3, dtype=torch.int64)
    rewards = torch.zeros(rows, 3)
    rewards[0, -1] = 1.0
    overrides = np.empty(rows, dtype=object)
    overrides[:] = [(s,) for s in states]
    return DataProto.from_dict(
        tensors={"responses": torch.arange(rows * 3).reshape(rows, 3), "response_mask": mask, "token_level_rewards": rewards},
        non_tensors={"uid": np.array(["p"] * rows, dtype=object), "anchor_states": overrides},
    )


@pytest.mark.parametrize("bad, what", [(None, "is None, which means no state"), (float("nan"), "float nan is or holds NaN")])
def test_a_none_or_nan_override_state_is_refused_naming_row_uid_and_turn(bad, what):
    data = one_turn_rows(["s", "s", bad, "s"])
    with pytest.raises(ValueError, match=rf"row 2 \(uid 'p'\), turn 0: anchor state {what}"):
        compute_advantage(data, adv_estimator="rllm_gigpo", config=CONFIG)


def test_tensor_override_states_of_equal_values_form_one_anchor_group():
    outcomes = [1.0, 0.0, 0.0, 0.0]
    mean = sum(outcomes) / 4
    std = (sum((r - mean) ** 2 for r in outcomes) / 4) ** 0.5
    grpo = [(r - mean) / (std + 1e-6) for r in outcomes]  # one turn per row: one anchor group gives gigpo = 2 * grpo
    data = one_turn_rows([torch.tensor([7, 8]) for _ in outcomes])
    got = compute_advantage(data, adv_estimator="rllm_gigpo", config=CONFIG).batch["advantages"][:, 0].tolist()
    assert got == pytest.approx([2 * a for a in grpo], rel=1e-5)
