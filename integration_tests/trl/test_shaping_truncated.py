"""``RLLMGRPOConfig.reward_shapers`` with TRL's ``mask_truncated_completions``: DAPO pairs its overlong punishment with it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

G = 4
MAX, BUFFER, FACTOR = 8, 4, 0.5


def dapo_by_hand(lengths):
    return [min(0.0, FACTOR * ((MAX - BUFFER) - n) / BUFFER) for n in lengths]


def test_a_completion_masked_as_truncated_still_pays_dapo_overlong_by_its_tokens(make_trainer, expected_advantages):
    """A truncated completion, whose ``completion_mask`` TRL zeroes under ``mask_truncated_completions``, still pays
    ``dapo_overlong`` by its tokens (counted from its ids), and the estimator sees that."""
    shapers = [{"name": "dapo_overlong", "max_length": MAX, "buffer": BUFFER, "factor": FACTOR}]
    trainer = make_trainer(adv_estimator="rloo", reward_shapers=shapers, max_steps=1, mask_truncated_completions=True)
    trainer.train()
    record = next(r for r in trainer.records if r["mode"] == "train")
    assert MAX in record["lengths"], "some completion reached max_completion_length (truncated)"
    per_func = record["rewards_per_func"].numpy().astype(np.float32)
    combined = (per_func * np.array([1.0, 0.5], dtype=np.float32)).sum(axis=1).astype(np.float64)
    terms = np.array(dapo_by_hand(record["lengths"]))
    want = expected_advantages(torch.from_numpy((combined + terms)[:, None]), [1.0], G, "rloo")
    logged = trainer.state.log_history[0]
    assert logged["shaping/all_groups/dapo_overlong/min"] == pytest.approx(terms.min(), abs=1e-6), "the truncated completions pay"
    np.testing.assert_allclose(record["advantages"].numpy(), want, rtol=0, atol=1e-6)
