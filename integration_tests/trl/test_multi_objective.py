"""``multi_objective_aggregation="normalize_then_sum"`` (GDPO) in real GRPOTrainer steps, for any rLLM estimator."""

from __future__ import annotations

import functools
import math
import statistics
from typing import Any

import numpy as np
import pytest
import torch
from rllm_trl import compute_advantages, prepare_batch
from rllm_trl.outcome import unique_names

UNSCORABLE = {4, 5}  # rows where every function returns None
LETTER_NONE = {1, 2, 6}  # rows where only the second function returns None


def length_or_none(completions: list[str], **_: Any) -> list[float | None]:
    return [None if i in UNSCORABLE else len(c) / 8.0 for i, c in enumerate(completions)]


def letter_a_or_none(completions: list[str], **_: Any) -> list[float | None]:
    return [None if i in UNSCORABLE | LETTER_NONE else float(c.count("a")) for i, c in enumerate(completions)]


def grpo_by_hand(values: list[float]) -> list[float]:
    if len(values) == 1:
        return [values[0] / (1 + 1e-6)]
    mean, std = statistics.fmean(values), statistics.pstdev(values)
    return [(v - mean) / (std + 1e-6) for v in values]


def rloo_by_hand(values: list[float]) -> list[float]:
    n = len(values)
    return list(values) if n == 1 else [v - (sum(values) - v) / (n - 1) for v in values]


def rf_baseline_centred(values: list[float]) -> list[float]:
    """REINFORCE++-baseline before its role whitening: r - group mean (0 baseline for a group of one)."""
    return list(values) if len(values) == 1 else [v - statistics.fmean(values) for v in values]


def gdpo_by_hand(rewards_per_func: torch.Tensor, weights: list[float], group: int, estimator: str) -> np.ndarray:
    """Per function and group the estimator on the present values, weighted sum, whitening (sample std + 1e-4)."""
    table = rewards_per_func.double().numpy().tolist()
    n, total = len(table), [0.0] * len(table)
    for f, weight in enumerate(weights):
        per_row: dict[int, float] = {}
        for start in range(0, n, group):
            keep = [i for i in range(start, start + group) if not math.isnan(table[i][f])]
            values = [table[i][f] for i in keep]
            if not keep:
                continue
            if estimator == "grpo":
                adv = grpo_by_hand(values)
            elif estimator == "rloo":
                adv = rloo_by_hand(values)
            else:
                adv = rf_baseline_centred(values)
            per_row.update(zip(keep, adv, strict=True))
        if estimator == "reinforce_plus_plus_baseline":  # whitened over every present row of the function
            scale = statistics.pstdev(per_row.values()) + 1e-6
            per_row = {i: a / scale for i, a in per_row.items()}
        for i, a in per_row.items():
            total[i] += weight * a
    scorable = [i for i in range(n) if any(not math.isnan(v) for v in table[i])]
    mean, std = statistics.fmean(total[i] for i in scorable), statistics.stdev(total[i] for i in scorable)
    out = np.zeros(n)
    for i in scorable:
        out[i] = (total[i] - mean) / (std + 1e-4)
    return out


def test_trl_grpo_with_normalize_then_sum_reproduces_stock_gdpo(make_trainer):
    trainer = make_trainer(stock=True, reward_funcs=[length_or_none, letter_a_or_none], multi_objective_aggregation="normalize_then_sum", max_steps=1)
    trainer.train()

    record = trainer.records[0]
    table = record["rewards_per_func"].numpy()
    assert np.isnan(table[sorted(UNSCORABLE)]).all() and np.isnan(table[sorted(LETTER_NONE), 1]).all()
    batch = prepare_batch(record["rewards_per_func"], trainer.reward_weights, trainer.num_generations)
    ours = compute_advantages(batch, "trl_grpo", aggregation="normalize_then_sum")
    stock = record["advantages"].double().numpy()
    np.testing.assert_allclose(ours, stock, rtol=0, atol=1e-6)
    assert np.abs(stock).max() > 0
    summed = compute_advantages(batch, "trl_grpo")
    assert np.abs(summed - stock).max() > 1e-3, "the two aggregations coincide on this batch; the test would not tell them apart"


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "reinforce_plus_plus_baseline"])
def test_training_step_with_two_reward_functions_and_normalize_then_sum(make_trainer, snapshot, estimator):
    trainer = make_trainer(
        adv_estimator=estimator, reward_funcs=[length_or_none, letter_a_or_none], multi_objective_aggregation="normalize_then_sum", max_steps=1
    )
    before = snapshot(trainer.model)
    trainer.train()

    after = snapshot(trainer.model)
    assert any(not torch.equal(before[name], after[name]) for name in before), "no parameter changed"
    record = trainer.records[0]
    expected = gdpo_by_hand(record["rewards_per_func"], [1.0, 0.5], 4, estimator)
    used = record["advantages"].double().numpy()
    np.testing.assert_allclose(used, expected, rtol=0, atol=1e-6)
    assert used[sorted(UNSCORABLE)].tolist() == [0.0, 0.0]
    assert np.abs(expected).max() > 0


def test_per_function_metrics_are_logged_per_role(make_trainer):
    trainer = make_trainer(
        adv_estimator="rloo",
        reward_funcs=[length_or_none, letter_a_or_none],
        multi_objective_aggregation="normalize_then_sum",
        role_column="role",
        max_steps=1,
    )
    trainer.train()

    logged = trainer.state.log_history[0]
    table = trainer.records[0]["rewards_per_func"].double().numpy()
    solver_letters = [v for v in table[:4, 1] if not math.isnan(v)]  # rows 0-3: the "solver" prompt; rows 1, 2 gave None
    assert logged["reward/solver/letter_a_or_none/mean"] == pytest.approx(statistics.fmean(solver_letters), abs=1e-6)
    assert logged["reward/solver/letter_a_or_none/max"] == pytest.approx(max(solver_letters), abs=1e-6)
    judge_lengths = [v for v in table[4:, 0] if not math.isnan(v)]
    assert logged["reward/judge/length_or_none/std"] == pytest.approx(statistics.pstdev(judge_lengths), abs=1e-6)
    assert {"reward/judge/letter_a_or_none/min", "reward/solver/length_or_none/mean", "advantage/judge/mean"} <= set(logged)


def scaled_length(completions: list[str], scale: float, **_: Any) -> list[float]:
    return [scale * len(c) for c in completions]


def test_reward_functions_sharing_a_name_keep_their_own_metrics(make_trainer):
    """Two partials of one function: TRL names both 'scaled_length'; each keeps its own reward/{role}/{func}/* keys."""
    trainer = make_trainer(reward_funcs=[functools.partial(scaled_length, scale=1.0), functools.partial(scaled_length, scale=-2.0)], max_steps=1)
    assert trainer.reward_func_names == ["scaled_length", "scaled_length"]
    trainer.train()

    logged = trainer.state.log_history[0]
    table = trainer.records[0]["rewards_per_func"].double().numpy()
    assert logged["reward/all_groups/scaled_length/mean"] == pytest.approx(statistics.fmean(table[:, 0]), abs=1e-5)
    assert logged["reward/all_groups/scaled_length_1/mean"] == pytest.approx(statistics.fmean(table[:, 1]), abs=1e-5)
    assert logged["reward/all_groups/scaled_length_1/max"] == pytest.approx(max(table[:, 1]), abs=1e-5)
    assert statistics.fmean(table[:, 1]) < 0 < statistics.fmean(table[:, 0])


def test_unique_names_give_a_repeated_name_its_function_index():
    assert unique_names(["f", "g", "f", "f"]) == ("f", "g", "f_2", "f_3")
    assert unique_names(["f", "f_1", "f"]) == ("f", "f_1", "f_2")
    assert unique_names([1, "1"]) == ("1", "1_1")
