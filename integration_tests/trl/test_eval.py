"""Evaluation groups completions by ``num_generations_eval``."""

from __future__ import annotations

import numpy as np


def test_eval_groups_by_num_generations_eval(make_trainer, prompt_dataset, expected_advantages):
    trainer = make_trainer(adv_estimator="rloo", num_generations_eval=2, per_device_eval_batch_size=4, max_steps=1)
    trainer.evaluate(eval_dataset=prompt_dataset.select(range(4)))

    records = [r for r in trainer.records if r["mode"] == "eval"]
    assert records
    for record in records:
        used = record["advantages"].double().numpy()
        assert used.shape == (4,)
        np.testing.assert_allclose(used, expected_advantages(record["rewards_per_func"], [1.0, 0.5], 2, "rloo"), rtol=0, atol=1e-6)
        # each pair sums to 0 under rloo: the groups really are of 2
        np.testing.assert_allclose(used.reshape(-1, 2).sum(axis=1), 0.0, atol=1e-6)
