"""``rllm_plugins.aggregation``: several reward functions, summed first or normalised first (GDPO), against plain loops."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from benchmarks.step_level import peak_bytes
from rllm_plugins.aggregation import aggregate_advantages, check_aggregation, normalize_then_sum, sum_then_normalize, whiten
from rllm_plugins.registry import get_estimator

NAN = math.nan


def grpo_by_hand(group: list[float], eps: float = 1e-6) -> list[float]:
    if len(group) == 1:
        return [group[0] / (1.0 + eps)]
    mean = sum(group) / len(group)
    std = statistics.pstdev(group)
    return [(r - mean) / (std + eps) for r in group]


def rloo_by_hand(group: list[float]) -> list[float]:
    n = len(group)
    if n == 1:
        return list(group)
    return [r - (sum(group) - r) / (n - 1) for r in group]


BY_HAND = {"grpo": grpo_by_hand, "rloo": rloo_by_hand}


def groups_of(sizes: list[int]) -> list[range]:
    out, start = [], 0
    for size in sizes:
        out.append(range(start, start + size))
        start += size
    return out


def gdpo_by_hand(rewards: list[list[float]], sizes: list[int], weights: list[float], estimator: str, eps: float = 1e-6) -> list[float]:
    """Per function, per group, the estimator on the present values; weighted sum; whitening over scorable rows."""
    n, f_count = len(rewards), len(weights)
    total = [0.0] * n
    for f in range(f_count):
        for rows in groups_of(sizes):
            keep = [i for i in rows if not math.isnan(rewards[i][f])]
            if keep:
                for i, a in zip(keep, BY_HAND[estimator]([rewards[i][f] for i in keep]), strict=True):
                    total[i] += weights[f] * a
    scorable = [i for i in range(n) if any(not math.isnan(v) for v in rewards[i])]
    out = [0.0] * n
    if len(scorable) >= 2:
        values = [total[i] for i in scorable]
        mean, std = statistics.fmean(values), statistics.stdev(values)
        for i in scorable:
            out[i] = (total[i] - mean) / (std + eps)
    return out


def summed_by_hand(rewards: list[list[float]], sizes: list[int], weights: list[float], estimator: str) -> list[float]:
    out = [0.0] * len(rewards)
    for rows in groups_of(sizes):
        keep = [i for i in rows if any(not math.isnan(v) for v in rewards[i])]
        combined = [sum(w * v for w, v in zip(weights, rewards[i], strict=True) if not math.isnan(v)) for i in keep]
        if keep:
            for i, a in zip(keep, BY_HAND[estimator](combined), strict=True):
                out[i] = a
    return out


def random_case(seed: int, f_count: int, sizes: list[int], nan_fraction: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rewards = rng.integers(0, 4, size=(sum(sizes), f_count)).astype(np.float64) / 2
    if nan_fraction:
        rewards[rng.random(rewards.shape) < nan_fraction] = np.nan
    return rewards


@pytest.mark.parametrize("f_count", [1, 2, 3, 4])
@pytest.mark.parametrize("estimator", ["grpo", "rloo"])
def test_normalize_then_sum_matches_gdpo_by_hand(f_count, estimator):
    sizes = [4, 1, 3, 4, 2]
    rewards = random_case(f_count, f_count, sizes)
    weights = [1.0, 0.5, 2.0, -1.0][:f_count]
    offsets = np.cumsum([0, *sizes])
    ours = normalize_then_sum(rewards, offsets, get_estimator(estimator).batched_form, weights=weights)
    np.testing.assert_allclose(ours, gdpo_by_hand(rewards.tolist(), sizes, weights, estimator), rtol=0, atol=1e-9)


@pytest.mark.parametrize("f_count", [1, 2, 3, 4])
def test_sum_then_normalize_matches_the_estimator_on_the_weighted_sum(f_count):
    sizes = [3, 3, 1, 2]
    rewards = random_case(10 + f_count, f_count, sizes)
    weights = [0.5, 1.0, 3.0, 1.0][:f_count]
    ours = sum_then_normalize(rewards, np.cumsum([0, *sizes]), get_estimator("rloo").batched_form, weights=weights)
    np.testing.assert_allclose(ours, summed_by_hand(rewards.tolist(), sizes, weights, "rloo"), rtol=0, atol=1e-12)


def test_none_in_one_function_only_leaves_that_function_out_of_its_group():
    rewards = np.array([[1.0, 0.0], [0.0, NAN], [1.0, 1.0], [0.0, 1.0], [NAN, NAN], [1.0, 0.0]])
    sizes, weights = [3, 3], [1.0, 2.0]
    ours = normalize_then_sum(rewards, np.array([0, 3, 6]), get_estimator("grpo").batched_form, weights=weights)
    expected = gdpo_by_hand(rewards.tolist(), sizes, weights, "grpo")
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-9)
    assert ours[4] == 0.0  # unscorable: every function is None
    summed = sum_then_normalize(rewards, np.array([0, 3, 6]), get_estimator("grpo").batched_form, weights=weights)
    np.testing.assert_allclose(summed, summed_by_hand(rewards.tolist(), sizes, weights, "grpo"), rtol=0, atol=1e-12)
    assert summed[4] == 0.0


@pytest.mark.parametrize("nan_fraction", [0.2, 0.5])
def test_random_missing_rewards_match_by_hand(nan_fraction):
    sizes = [4, 4, 1, 5, 3, 2]
    rewards = random_case(7, 3, sizes, nan_fraction)
    offsets = np.cumsum([0, *sizes])
    ours = normalize_then_sum(rewards, offsets, get_estimator("rloo").batched_form, weights=[1.0, 2.0, 0.5])
    np.testing.assert_allclose(ours, gdpo_by_hand(rewards.tolist(), sizes, [1.0, 2.0, 0.5], "rloo"), rtol=0, atol=1e-9)


def test_groups_of_one_and_a_single_row_role():
    ones = np.array([[1.0, 2.0], [3.0, 0.0], [0.0, 0.0]])
    ours = normalize_then_sum(ones, np.arange(4), get_estimator("grpo").batched_form)
    np.testing.assert_allclose(ours, gdpo_by_hand(ones.tolist(), [1, 1, 1], [1.0, 1.0], "grpo"), atol=1e-9)
    single = normalize_then_sum(np.array([[1.0, 2.0]]), np.array([0, 1]), get_estimator("grpo").batched_form)
    assert single.tolist() == [0.0]  # no spread in a role of one row


def test_whitening_over_scorable_rows_uses_the_sample_std():
    values = np.array([1.0, 2.0, 99.0, 4.0])
    out = whiten(values, np.array([True, True, False, True]), epsilon=1e-4)
    mean, std = statistics.fmean([1.0, 2.0, 4.0]), statistics.stdev([1.0, 2.0, 4.0])
    np.testing.assert_allclose(out, [(1 - mean) / (std + 1e-4), (2 - mean) / (std + 1e-4), 0.0, (4 - mean) / (std + 1e-4)], atol=1e-12)
    assert whiten(np.array([3.0, 3.0]), epsilon=0.0).tolist() == [0.0, 0.0]


def test_the_estimator_options_reach_every_function_call():
    rewards = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    grpo = get_estimator("grpo").batched_form
    plain = normalize_then_sum(rewards, np.array([0, 2, 4]), grpo, norm_adv_by_std_in_grpo=False, whiten_epsilon=0.0)
    centred = [[0.5, -0.5], [-0.5, 0.5], [0.5, 0.5], [-0.5, -0.5]]  # r - group mean, per function
    total = [sum(row) for row in centred]
    mean, std = statistics.fmean(total), statistics.stdev(total)
    np.testing.assert_allclose(plain, [(t - mean) / std for t in total], atol=1e-12)


def test_lengths_are_subset_with_the_rows_of_each_function():
    rewards = np.array([[1.0, NAN], [0.0, 1.0], [1.0, 0.0]])
    seen = []

    def recording(values, offsets, /, *, lengths=None, **_):
        seen.append((values.tolist(), offsets.tolist(), None if lengths is None else lengths.tolist()))
        return values - values.mean()

    normalize_then_sum(rewards, np.array([0, 3]), recording, lengths=np.array([5.0, 6.0, 7.0]))
    assert seen == [([1.0, 0.0, 1.0], [0, 3], [5.0, 6.0, 7.0]), ([1.0, 0.0], [0, 2], [6.0, 7.0])]


def test_int_and_bool_rewards_are_numbers():
    as_float = normalize_then_sum(np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), np.array([0, 3]), get_estimator("grpo").batched_form)
    as_int = normalize_then_sum(np.array([[1, 0], [0, 1], [1, 1]]), np.array([0, 3]), get_estimator("grpo").batched_form)
    as_bool = normalize_then_sum(np.array([[True, False], [False, True], [True, True]]), np.array([0, 3]), get_estimator("grpo").batched_form)
    np.testing.assert_array_equal(as_int, as_float)
    np.testing.assert_array_equal(as_bool, as_float)


def test_aggregate_advantages_dispatches_by_name():
    rewards = random_case(3, 2, [3, 3])
    grpo = get_estimator("grpo").batched_form
    offsets = np.array([0, 3, 6])
    np.testing.assert_array_equal(aggregate_advantages(rewards, offsets, grpo, aggregation="normalize_then_sum"), normalize_then_sum(rewards, offsets, grpo))
    np.testing.assert_array_equal(aggregate_advantages(rewards, offsets, grpo, whiten_epsilon=1e-4), sum_then_normalize(rewards, offsets, grpo))


@pytest.mark.parametrize("value", ["normalise_then_sum", "", None, 1])
def test_unknown_aggregation_names_the_choices(value):
    with pytest.raises(ValueError, match=r"multi_objective_aggregation must be one of 'sum_then_normalize', 'normalize_then_sum', got"):
        check_aggregation(value)


def test_bad_inputs_say_what_and_where():
    grpo = get_estimator("grpo").batched_form
    with pytest.raises(ValueError, match=r"row 1, reward function 1 \('format'\): reward is inf"):
        normalize_then_sum(np.array([[1.0, 0.0], [0.0, np.inf]]), np.array([0, 2]), grpo, names=["correct", "format"])
    with pytest.raises(ValueError, match="3 weights for 2 reward functions"):
        normalize_then_sum(np.zeros((2, 2)), np.array([0, 2]), grpo, weights=[1, 2, 3])
    with pytest.raises(ValueError, match="weights must be finite"):
        sum_then_normalize(np.zeros((2, 2)), np.array([0, 2]), grpo, weights=[1, np.nan])
    with pytest.raises(ValueError, match="rewards must be real numbers"):
        sum_then_normalize(np.array([["a"], ["b"]]), np.array([0, 2]), grpo)
    with pytest.raises(ValueError, match="whiten_epsilon must be a finite number >= 0"):
        normalize_then_sum(np.zeros((2, 1)), np.array([0, 2]), grpo, whiten_epsilon=-1.0)
    with pytest.raises(ValueError, match="offsets must start at 0 and end at the number of values"):
        normalize_then_sum(np.zeros((3, 1)), np.array([0, 2]), grpo)


def test_a_misbehaving_estimator_is_named_with_the_function():
    def short(values, offsets, /, **_):
        return values[:-1]

    def infinite(values, offsets, /, **_):
        return values / 0.0

    with pytest.raises(ValueError, match=r"reward function 0 \('correct'\): the estimator returned 1 advantages for 2 rows"):
        normalize_then_sum(np.ones((2, 1)), np.array([0, 2]), short, names=["correct"], where="role 'solver'")
    with np.errstate(divide="ignore"), pytest.raises(ValueError, match=r"advantages must be finite"):
        sum_then_normalize(np.ones((2, 1)), np.array([0, 2]), infinite)


def test_an_estimator_returning_its_input_leaves_the_callers_rewards_alone():
    def identity(values, offsets, /, **_):
        return values

    rewards = np.array([[1.0], [3.0], [2.0]])
    out = normalize_then_sum(rewards, np.array([0, 3]), identity)
    assert rewards.tolist() == [[1.0], [3.0], [2.0]]
    np.testing.assert_allclose(out, [-1.0, 1.0, 0.0], atol=1e-5)


def test_an_array_the_estimator_keeps_is_not_written_over():
    kept: list[np.ndarray] = []

    def keeping(values, offsets, /, **_):
        kept.append(np.array(values))
        return kept[-1]

    normalize_then_sum(np.array([[1.0, 4.0], [3.0, 0.0], [2.0, 2.0]]), np.array([0, 3]), keeping, weights=[2.0, 1.0])
    assert [k.tolist() for k in kept] == [[1.0, 3.0, 2.0], [4.0, 0.0, 2.0]]


@pytest.mark.parametrize("f_count", [1, 2, 3])
@pytest.mark.parametrize("estimator", ["grpo", "rloo", "reinforce_plus_plus_baseline"])
def test_normalize_then_sum_needs_no_more_memory_than_the_separate_calls(f_count, estimator):
    """Its numpy peak is at most that of F calls whose results are kept: each function's advantages are released in time."""
    n = 1 << 16
    rng = np.random.default_rng(0)
    table = np.asfortranarray(rng.normal(size=(n, f_count)))
    columns = [np.ascontiguousarray(table[:, f]) for f in range(f_count)]
    offsets, weights = np.arange(0, n + 1, 8), np.linspace(1.0, 0.5, f_count)
    batched = get_estimator(estimator).batched_form

    def peak(fn) -> int:
        fn()  # caches built once, outside the measurement
        return peak_bytes(fn)

    separate = peak(lambda: [batched(c, offsets) for c in columns])
    ours = peak(lambda: normalize_then_sum(table, offsets, batched, weights=weights))
    assert ours < separate + n * 8 // 4, f"normalize_then_sum peaks at {ours} bytes, {f_count} kept calls at {separate}; an (N,) vector is {n * 8}"
