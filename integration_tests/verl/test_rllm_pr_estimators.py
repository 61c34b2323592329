"""rLLM's open-PR estimators through verl's own ``compute_advantage``: ``rllm_pkpo`` (PR #743, ``k`` checked against
``rollout.n``) and ``rllm_minus_length_weighted_mean`` (PR #757, outcome mode)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

pytest.importorskip("verl")
from rllm_verl.tools.check import verl_check
from verl.trainer.ppo.ray_trainer import compute_advantage

REWARDS = [1.0, 0.0, 0.5, 1.0, 3.0, 0.0, 0.0, 2.0, 1.0]
LENGTHS = [7, 3, 5, 1, 4, 6, 2, 1, 7]
UIDS = ["a", "a", "b", "a", "solo", "b", "b", "c", "c"]


def by_subsets(rewards: np.ndarray, k: int) -> np.ndarray:
    """PR #743's formula over every k-subset in exact fractions (k clamped to the group size), mean-centred."""
    r = [Fraction(float(x)) for x in rewards]
    n = len(r)
    if n <= 1:
        return np.zeros(n)
    k = max(1, min(k, n))
    credit = [Fraction(0)] * n
    for subset in itertools.combinations(range(n), k):
        for i in subset:
            credit[i] += max(r[j] for j in subset)
    credit = [c / math.comb(n, k) for c in credit]
    return np.array([float(c - sum(credit) / n) for c in credit])


@pytest.mark.parametrize("k", [1, 2, 3])
def test_rllm_pkpo_matches_the_formula_broadcast_over_the_mask(ref, algorithm_config, k):
    data = ref.make_batch(REWARDS, LENGTHS, UIDS)
    config = algorithm_config(adv_estimator="rllm_pkpo", rllm_estimator_kwargs={"k": k})
    out = compute_advantage(data, adv_estimator="rllm_pkpo", config=config)
    mask = data.batch["response_mask"]
    expected = ref.broadcast(ref.per_group(np.array(REWARDS), UIDS, lambda r: by_subsets(r, k)), mask)
    np.testing.assert_allclose(out.batch["advantages"].numpy(), expected, rtol=1e-6, atol=1e-6)


def test_k_is_checked_against_the_rollout_group_size():
    good = verl_check(["algorithm.adv_estimator=rllm_pkpo", "+algorithm.rllm_estimator_kwargs.k=4", "actor_rollout_ref.rollout.n=8"])
    assert good.ok, good
    same = verl_check(["algorithm.adv_estimator=rllm_pkpo", "+algorithm.rllm_estimator_kwargs.k=8", "actor_rollout_ref.rollout.n=8"])
    assert not same.ok and "estimator 'pkpo': k=8 is not below the group size 8" in same.errors[0]


def test_rllm_minus_length_weighted_mean_uses_one_baseline_per_batch_weighted_by_the_mask(ref, algorithm_config):
    data = ref.make_batch(REWARDS, LENGTHS, UIDS)
    out = compute_advantage(data, adv_estimator="rllm_minus_length_weighted_mean", config=algorithm_config(adv_estimator="rllm_minus_length_weighted_mean"))
    mask = data.batch["response_mask"]
    tokens = sum(LENGTHS)
    baseline = sum(r * n for r, n in zip(REWARDS, LENGTHS, strict=True)) / tokens
    expected = ref.broadcast(np.array([r - baseline for r in REWARDS]), mask)
    np.testing.assert_allclose(out.batch["advantages"].numpy(), expected, rtol=1e-6, atol=1e-6)
