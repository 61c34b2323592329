"""Completions every reward function declined (None): out of the baseline, advantage 0."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

UNSCORABLE = {1, 4, 5, 6, 7}  # row 1 shares group 0 with scorable rows; rows 4-7 are all of group 1


def length_or_none(completions: list[str], **_: Any) -> list[float | None]:
    return [None if i in UNSCORABLE else 1.0 + i + len(c) / 8.0 for i, c in enumerate(completions)]


def letter_a_or_none(completions: list[str], **_: Any) -> list[float | None]:
    return [None if i in UNSCORABLE or i == 2 else float(c.count("a")) for i, c in enumerate(completions)]


def test_unscorable_rows_get_zero_and_leave_the_group_baseline(make_trainer):
    trainer = make_trainer(reward_funcs=[length_or_none, letter_a_or_none], adv_estimator="grpo", max_steps=1)
    trainer.train()

    record = trainer.records[0]
    used = record["advantages"].double().numpy()
    per_func = record["rewards_per_func"].numpy()
    assert np.all(used[sorted(UNSCORABLE)] == 0.0)
    scored = [0, 2, 3]  # row 2 has one NaN function: scorable, NaN counted as 0
    r = np.array([per_func[i, 0] + 0.5 * (0.0 if np.isnan(per_func[i, 1]) else per_func[i, 1]) for i in scored], dtype=np.float32).astype(np.float64)
    expected = (r - r.mean()) / (r.std() + 1e-6)
    np.testing.assert_allclose(used[scored], expected, rtol=0, atol=1e-6)
    assert abs(trainer.state.log_history[0]["reward/all_groups/mean"] - r.mean()) < 1e-5  # metrics over scorable rows only


def first_of_group_two_passes_others_of_group_one_none(completions: list[str], **_: Any) -> list[float | None]:
    """Rows 1-3 unscorable (group 0 keeps one row); group 1: row 4 passes, rows 5-7 fail."""
    return [None if i in (1, 2, 3) else (1.0 if i in (0, 4) else 0.0) for i in range(len(completions))]


def test_passk_training_gives_a_group_left_smaller_than_k_zero_and_trains_on(make_trainer):
    """k=2, num_generations=4, three of a group's four rewards None (before: training stopped, blaming the group size)."""
    trainer = make_trainer(
        reward_funcs=[first_of_group_two_passes_others_of_group_one_none],
        reward_weights=[1.0],
        adv_estimator="passk_training",
        adv_estimator_kwargs={"k": 2},
        max_steps=1,
    )
    trainer.train()

    used = trainer.records[0]["advantages"].double().numpy()
    p = math.comb(3, 2) / math.comb(4, 2)  # group 1: one success in 4, a 2-subset fails with chance C(3, 2) / C(4, 2)
    std = math.sqrt(p * (1 - p))
    expected = [0.0] * 4 + [p / (std + 1e-6)] + [-p * (1 / 3) / (std + 1e-6)] * 3
    np.testing.assert_allclose(used, expected, rtol=0, atol=1e-6)
