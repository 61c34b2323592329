"""Real GRPOTrainer training steps with rLLM estimators chosen by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch

BUILTINS = ["grpo", "reinforce", "reinforce_plus_plus_baseline", "rloo", "prpo", "opo", "grpo_passk", "trl_grpo", "trl_grpo_batch"]


@pytest.mark.parametrize("estimator", [*BUILTINS, "median_baseline"])
def test_training_uses_the_named_estimator_on_the_gathered_rewards(make_trainer, expected_advantages, snapshot, estimator):
    trainer = make_trainer(adv_estimator=estimator)
    before = snapshot(trainer.model)
    trainer.train()

    after = snapshot(trainer.model)
    assert any(not torch.equal(before[name], after[name]) for name in before), "no parameter changed"
    assert len(trainer.records) == 2
    for record in trainer.records:
        expected = expected_advantages(record["rewards_per_func"], [1.0, 0.5], 4, estimator, lengths=record["lengths"])
        used = record["advantages"]
        assert used.dtype == torch.float32 and used.device.type == "cpu" and used.shape == (8,)
        np.testing.assert_allclose(used.numpy(), expected, rtol=0, atol=1e-6)
        assert np.abs(expected).max() > 0, "the rewards gave no learning signal; the test would not show the estimator is used"


def test_training_logs_rllm_metrics_and_the_advantages_used(make_trainer):
    trainer = make_trainer(adv_estimator="rloo")
    trainer.train()

    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 2
    for entry in logged:
        for key in ("reward/all_groups/mean", "reward/all_groups/std", "advantage/all_groups/mean", "advantage/all_groups/fraction_zero"):
            assert key in entry
    last = trainer.records[-1]
    assert list(trainer._logs["advantages"]) == pytest.approx(last["advantages"].double().numpy().tolist(), abs=1e-6)
    combined = np.nansum(last["rewards_per_func"].numpy() * np.array([1.0, 0.5], dtype=np.float32), axis=1)
    assert logged[-1]["reward/all_groups/mean"] == pytest.approx(float(combined.mean()), abs=1e-5)
    assert logged[-1]["advantage/all_groups/mean"] == pytest.approx(0.0, abs=1e-5)  # rloo's advantages sum to 0 per group
    # rLLM main's batch/{role}/... diagnostics (rllm/trainer/algorithms/advantage.py, collect_reward_and_advantage_from_trajectory_groups)
    groups = combined.astype(np.float64).reshape(2, 4)
    informative = sum(1 for g in groups if g.std() >= 1e-8)
    assert logged[-1]["batch/all_groups/total"] == 2
    assert logged[-1]["batch/all_groups/fractions/effective"] == pytest.approx(informative / 2)
    assert logged[-1]["batch/all_groups/group_reward_mean/p50"] == pytest.approx(float(groups.mean(axis=1).mean()), abs=1e-5)  # median of two


def test_role_column_applies_the_estimator_map_per_role(make_trainer, expected_advantages):
    trainer = make_trainer(adv_estimator="grpo", adv_estimator_map={"judge": "rloo"}, role_column="role", max_steps=1)
    trainer.train()

    record = trainer.records[0]  # rows 0-3: a "solver" prompt, rows 4-7: a "judge" prompt
    used = record["advantages"].double().numpy()
    np.testing.assert_allclose(used[:4], expected_advantages(record["rewards_per_func"][:4], [1.0, 0.5], 4, "grpo"), atol=1e-6)
    np.testing.assert_allclose(used[4:], expected_advantages(record["rewards_per_func"][4:], [1.0, 0.5], 4, "rloo"), atol=1e-6)
    logged = trainer.state.log_history[0]
    assert "advantage/solver/mean" in logged and "advantage/judge/mean" in logged
