"""Parity with TRL's own GRPO advantages: ``trl_grpo`` / ``trl_grpo_batch`` on the rewards a stock GRPOTrainer gathered."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from rllm_trl import compute_advantages, prepare_batch

UNSCORABLE = {1, 4, 5, 6, 7}  # row 1: a group mixing scorable and unscorable rows; rows 4-7: a whole group


def length_or_none(completions: list[str], **_: Any) -> list[float | None]:
    return [None if i in UNSCORABLE else len(c) / 8.0 for i, c in enumerate(completions)]


def letter_a_or_none(completions: list[str], **_: Any) -> list[float | None]:
    return [None if i in UNSCORABLE or i == 2 else float(c.count("a")) for i, c in enumerate(completions)]


@pytest.mark.parametrize(
    ("scale_rewards", "estimator", "norm"),
    [("group", "trl_grpo", True), ("batch", "trl_grpo_batch", True), ("none", "trl_grpo", False)],
)
def test_trl_estimators_reproduce_grpo_trainer_advantages(make_trainer, scale_rewards, estimator, norm):
    trainer = make_trainer(stock=True, reward_funcs=[length_or_none, letter_a_or_none], scale_rewards=scale_rewards, max_steps=1)
    trainer.train()

    record = trainer.records[0]
    batch = prepare_batch(record["rewards_per_func"], trainer.reward_weights, trainer.num_generations)
    ours = compute_advantages(batch, estimator, norm_adv_by_std_in_grpo=norm)
    trl_advantages = record["advantages"].double().numpy()
    assert np.isnan(record["rewards_per_func"].numpy()[sorted(UNSCORABLE)]).all()
    np.testing.assert_allclose(ours, trl_advantages, rtol=0, atol=2e-6)
    assert np.abs(trl_advantages).max() > 0
