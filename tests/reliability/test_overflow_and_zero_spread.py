"""Groups at the edges of float64 and of the std division: the right number, never NaN, zeros or a warning.

Every expected value is written from the formula with Python's ``fractions`` (exact) or plain floats.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest

from rllm_plugins import get_rllm_adv_estimator
from rllm_plugins.segments import GroupLayout

BIG = [1e308, 1e308, 0.0]  # the sum overflows float64, every difference fits


def exact_mean(values: list[float]) -> float:
    return float(sum(Fraction(v) for v in values) / len(values))


def exact_std(values: list[float], ddof: int) -> float:
    mean = sum(Fraction(v) for v in values) / len(values)
    variance = sum((Fraction(v) - mean) ** 2 for v in values) / (len(values) - ddof)
    scale = max(abs(Fraction(v) - mean) for v in values)
    return float(scale) * math.sqrt(float(variance / scale**2))  # sqrt of a number in [0, n]: no overflow


def test_a_group_whose_sum_overflows_has_its_exact_mean():
    layout = GroupLayout.from_offsets([0, 3, 5], 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mean = layout.mean(np.array([*BIG, 1.0, 2.0]))
    assert mean.tolist() == [exact_mean(BIG), 1.5]


def test_grpo_and_its_kin_on_a_group_whose_sum_overflows():
    mean, pop, sample = exact_mean(BIG), exact_std(BIG, 0), exact_std(BIG, 1)
    expected = {
        "grpo": [(r - mean) / (pop + 1e-6) for r in BIG],
        "verl_grpo": [(r - mean) / (sample + 1e-6) for r in BIG],
        "trl_grpo": [(r - mean) / (sample + 1e-4) for r in BIG],
        "rloo": [r - exact_mean([x for j, x in enumerate(BIG) if j != i]) for i, r in enumerate(BIG)],
        "dr_grpo": [r - mean for r in BIG],
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name, want in expected.items():
            got = get_rllm_adv_estimator(name)([np.array(BIG), np.array([1.0, 0.0])])[0][0]
            np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=name)


EPSILON_ZERO = [
    "grpo",
    "verl_grpo",
    "trl_grpo",
    "trl_grpo_batch",
    "prpo",
    "prpo_std_optional",
    "reinforce_plus_plus_baseline",
    "grpo_passk",
    "passk_training",
]


@pytest.mark.parametrize("name", EPSILON_ZERO)
def test_epsilon_zero_gives_a_group_of_equal_rewards_advantage_zero(name):
    """0 / 0 is 0 there (as TRL's nan_to_num gives), never NaN, with no warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        advantages, _ = get_rllm_adv_estimator(name)([np.array([1.0, 1.0, 1.0])], epsilon=0.0)
    assert advantages[0].tolist() == [0.0, 0.0, 0.0]


def test_epsilon_zero_leaves_a_group_with_spread_divided_by_its_std():
    advantages, _ = get_rllm_adv_estimator("grpo")([np.array([1.0, 1.0]), np.array([3.0, 1.0])], epsilon=0.0)
    assert [a.tolist() for a in advantages] == [[0.0, 0.0], [1.0, -1.0]]  # (3 - 2) / 1, (1 - 2) / 1


def test_grpo_passk_on_an_empty_group_warns_nothing_and_credits_only_the_best_elsewhere():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        advantages, _ = get_rllm_adv_estimator("grpo_passk")([np.array([]), np.array([1.0, 0.0, 2.0])])
    std = exact_std([1.0, 0.0, 2.0], 0)
    assert advantages[0].tolist() == []
    np.testing.assert_allclose(advantages[1], [0.0, 0.0, (2.0 - 1.0) / (std + 1e-6)], rtol=1e-15)


def test_groups_whose_sums_overflow_both_ways_warn_nothing():
    """Their first means are +inf and -inf: the check that sends them to the rescaled mean adds the two."""
    layout = GroupLayout.from_offsets([0, 3, 6], 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mean = layout.mean(np.array([1.7e308, 1.7e308, -1.7e308, 1.7e308, -1.7e308, -1.7e308]))
    assert mean.tolist() == [exact_mean([1.7e308, 1.7e308, -1.7e308]), exact_mean([1.7e308, -1.7e308, -1.7e308])]
