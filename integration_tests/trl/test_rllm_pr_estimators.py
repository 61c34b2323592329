"""rLLM's open-PR estimators by name in TRL: ``pkpo`` (PR #743) in a real ``RLLMGRPOTrainer`` step, with the config-time
check of ``k``, and ``minus_length_weighted_mean`` (PR #757, outcome mode) on gathered rewards."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import torch
from rllm_trl import RLLMGRPOConfig, compute_advantages, prepare_batch

BASE = {"output_dir": "unused", "use_cpu": True, "bf16": False}
REWARDS = [0.0, None, 1.0, 0.5, 1.0, 0.0, 0.0, 2.0]  # groups of 4; row 1 unscorable, so group 0 keeps three rows


def by_subsets(rewards: list[Fraction], k: int) -> list[Fraction]:
    """PR #743's formula over every k-subset (k clamped to the group size), mean-centred."""
    n = len(rewards)
    if n <= 1:
        return [Fraction(0)] * n
    k = max(1, min(k, n))
    credit = [Fraction(0)] * n
    for subset in itertools.combinations(range(n), k):
        for i in subset:
            credit[i] += max(rewards[j] for j in subset)
    credit = [c / math.comb(n, k) for c in credit]
    return [c - sum(credit) / n for c in credit]


def fixed_rewards(completions: list[str], **_: Any) -> list[float | None]:
    return REWARDS[: len(completions)]


def test_a_training_step_uses_pkpo_advantages(make_trainer):
    trainer = make_trainer(reward_funcs=[fixed_rewards], reward_weights=[1.0], adv_estimator="pkpo", adv_estimator_kwargs={"k": 2}, max_steps=1)
    trainer.train()

    used = trainer.records[0]["advantages"].double().numpy()
    group0 = by_subsets([Fraction(0), Fraction(1), Fraction(1, 2)], 2)  # the three scorable rows 0, 2, 3
    group1 = by_subsets([Fraction(1), Fraction(0), Fraction(0), Fraction(2)], 2)
    expected = [group0[0], 0, group0[1], group0[2], *group1]
    np.testing.assert_allclose(used, [float(x) for x in expected], rtol=0, atol=1e-6)


def test_k_not_below_num_generations_is_refused_when_the_config_is_built():
    assert RLLMGRPOConfig(**BASE, adv_estimator="pkpo", adv_estimator_kwargs={"k": 4}, num_generations=8).adv_estimator_kwargs == {"k": 4}
    with pytest.raises(ValueError, match=r"adv_estimator with num_generations=8: estimator 'pkpo': k=8 is not below the group size 8"):
        RLLMGRPOConfig(**BASE, adv_estimator="pkpo", adv_estimator_kwargs={"k": 8}, num_generations=8)
    with pytest.raises(ValueError, match=r"estimator 'pkpo': k must be at least 1, got 0"):
        RLLMGRPOConfig(**BASE, adv_estimator="pkpo", adv_estimator_kwargs={"k": 0}, num_generations=8)


def test_minus_length_weighted_mean_has_one_baseline_for_the_gathered_batch_weighted_by_completion_length():
    rewards = torch.tensor([[1.0], [0.0], [0.5], [2.0], [1.0], [float("nan")], [0.0], [3.0]])
    lengths = torch.tensor([3, 1, 4, 2, 5, 7, 1, 2])
    advantages = compute_advantages(prepare_batch(rewards, torch.tensor([1.0]), 4, lengths=lengths), "minus_length_weighted_mean")
    scorable = [i for i in range(8) if i != 5]  # row 5 is unscorable: out of the baseline, advantage 0
    baseline = sum(float(rewards[i, 0]) * int(lengths[i]) for i in scorable) / sum(int(lengths[i]) for i in scorable)
    expected = [0.0 if i == 5 else float(rewards[i, 0]) - baseline for i in range(8)]
    np.testing.assert_allclose(advantages, expected, rtol=0, atol=1e-6)
