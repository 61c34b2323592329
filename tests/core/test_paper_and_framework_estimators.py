"""maxrl, passk_training, gpg, dr_grpo and verl's grpo / rloo_vectorized / reinforce_plus_plus_baseline by name.

Each against hand-worked numbers and an independent per-group computation written plainly here
(Python loops, ``math.comb`` for the binomials); parity with verl's own code is in
``integration_tests/verl/test_named_verl_parity.py``.
"""

import math

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups, get_rllm_adv_estimator
from rllm_plugins.estimators.passk_training import check_passk_k
from rllm_plugins.registry import get_estimator
from rllm_plugins.segments import offsets_from_sizes
from rllm_plugins.testing import assert_estimator_contract

EPS = 1e-6
NAMES = ["maxrl", "passk_training", "gpg", "dr_grpo", "verl_grpo", "verl_rloo_vectorized", "verl_reinforce_plus_plus_baseline"]


def random_groups(seed, binary=False, max_size=9, count=12):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, max_size, count)
    if binary:
        return [rng.integers(0, 2, n).astype(np.float64) for n in sizes]
    return [np.round(rng.normal(0.5, 2.0, n), 3) for n in sizes]


def run(name, groups, **kwargs):
    advantages, returns = get_rllm_adv_estimator(name)(rewards=[np.asarray(g, dtype=np.float64) for g in groups], **kwargs)
    for a, r in zip(advantages, returns, strict=True):
        np.testing.assert_array_equal(a, r)
    return advantages


def batched(name, groups, **kwargs):
    values = np.concatenate([np.asarray(g, dtype=np.float64) for g in groups])
    return get_estimator(name).batched_form(values, offsets_from_sizes([len(g) for g in groups]), **kwargs)


def assert_groups(actual, expected, tol=1e-9):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", NAMES)
def test_contract_and_both_forms_agree_on_random_groups(name):
    assert_estimator_contract(name)
    groups = random_groups(3)
    lengths = np.arange(1.0, 1.0 + sum(len(g) for g in groups))
    np.testing.assert_allclose(np.concatenate(run(name, groups, lengths=lengths)), batched(name, groups, lengths=lengths), rtol=1e-12, atol=1e-12)


# --- maxrl ---------------------------------------------------------------------------------------


def reference_maxrl(group):
    mean = sum(group) / len(group)
    return np.zeros(len(group)) if mean == 0 else np.array([(r - mean) / abs(mean) for r in group])


def test_maxrl_hand_worked():
    advantages = run("maxrl", [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0], [1, 1], [1], [0], [2.0, 4.0]])
    assert_groups(advantages, [[3, -1, -1, -1], [1, 1, -1, -1], [0, 0, 0], [0, 0], [0], [0], [-1 / 3, 1 / 3]])


def test_maxrl_weighs_hard_prompts_by_one_over_the_success_rate():
    """One success in 8 gets 7, one in 2 gets 1: (1 - p) / p; every failure -1."""
    advantages = run("maxrl", [[1] + [0] * 7, [1, 0]])
    assert_groups(advantages, [[7] + [-1] * 7, [1, -1]])


def test_maxrl_divides_by_the_absolute_mean_so_a_negative_mean_keeps_the_direction():
    advantages = run("maxrl", [[-1.0, -3.0], [-1.0, 1.0], [-1.0, -1.0, 1.0]])
    assert_groups(advantages, [[0.5, -0.5], [0.0, 0.0], [-2.0, -2.0, 4.0]])  # means -2, 0, -1/3
    assert advantages[0][0] > 0  # the better reward


def test_maxrl_random_groups_against_a_plain_loop():
    for binary in (True, False):
        groups = random_groups(7, binary=binary)
        assert_groups(run("maxrl", groups), [reference_maxrl(list(g)) for g in groups])


# --- passk_training -----------------------------------------------------------------------------


def reference_passk(group, k, eps=EPS, norm=True):
    """The paper's formula with binomials: mean = 1 - C(n_neg, k) / C(n, k), A_neg with C(n_neg - 1, k - 1) / C(n - 1, k - 1)."""
    n = len(group)
    n_neg = sum(1 for r in group if r <= 0)
    mean = 1 - math.comb(n_neg, k) / math.comb(n, k)
    std = math.sqrt(mean * (1 - mean))
    scale = std + eps if norm else 1.0
    positive = (1 - mean) / scale
    negative = (1 - mean - (math.comb(n_neg - 1, k - 1) / math.comb(n - 1, k - 1) if n_neg > 0 else 0.0)) / scale
    return np.array([positive if r > 0 else negative for r in group])


def test_passk_training_hand_worked():
    """[1, 0, 0, 0], k = 2: mean = 1 - C(3,2)/C(4,2) = 0.5, std 0.5; A_pos = 0.5/0.5, A_neg = (0.5 - C(2,1)/C(3,1))/0.5."""
    advantages = run("passk_training", [[1, 0, 0, 0]], k=2)
    assert_groups(advantages, [[0.5 / (0.5 + EPS)] + [(0.5 - 2 / 3) / (0.5 + EPS)] * 3])
    np.testing.assert_allclose(advantages[0], [1.0, -1 / 3, -1 / 3, -1 / 3], rtol=1e-5)


def test_passk_training_random_groups_against_the_binomial_formula():
    for k in (1, 2, 3, 5):
        rng = np.random.default_rng(k)
        groups = [rng.integers(0, 2, n).astype(np.float64) for n in rng.integers(k, 12, 15)]
        assert_groups(run("passk_training", groups, k=k), [reference_passk(list(g), k) for g in groups])
        assert_groups(run("passk_training", groups, k=k, norm_adv_by_std_in_grpo=False), [reference_passk(list(g), k, norm=False) for g in groups])


def test_passk_training_with_k_1_is_grpo_on_binary_rewards():
    groups = [g for g in random_groups(11, binary=True) if len(g) > 1]
    assert_groups(run("passk_training", groups, k=1), run("grpo", groups))


def test_passk_training_zero_cases():
    """k = n (one k-subset), all pass, all fail, fewer than k failures, and a group of one: 0 everywhere."""
    advantages = run("passk_training", [[1, 0, 0], [1, 1, 1, 1], [0, 0, 0], [1, 1, 0, 1]], k=3)
    assert_groups(advantages, [[0, 0, 0], [0, 0, 0, 0], [0, 0, 0], [0, 0, 0, 0]])
    assert_groups(run("passk_training", [[1], [0]]), [[0], [0]])


def test_passk_training_reads_a_reward_above_zero_as_a_success():
    assert_groups(run("passk_training", [[0.7, -0.2, 0.0, 3.0, 0.0]], k=2), run("passk_training", [[1, 0, 0, 1, 0]], k=2))


def test_passk_training_rejects_a_bad_k():
    bad_ks = [(0, "at least 1, got 0"), (-2, "at least 1, got -2"), (2.0, "an int .*got float 2.0"), ("2", "an int .*got str '2'"), (True, "an int")]
    for bad, message in bad_ks:
        with pytest.raises(ValueError, match=f"estimator 'passk_training': k must be {message}"):
            run("passk_training", [[1, 0, 0]], k=bad)
    assert run("passk_training", [[1, 0, 0, 0]], k=np.int64(2))[0][0] > 0  # numpy ints are ints


def test_passk_training_gives_a_group_smaller_than_k_zero_and_the_others_their_value():
    """A group left with fewer than k trajectories (unscorable ones removed) has no k-subset (before: a ValueError)."""
    advantages = run("passk_training", [[1, 0, 0, 0], [1, 0], [1]], k=3)
    p = math.comb(3, 3) / math.comb(4, 3)  # 1 success in 4: a 3-subset fails with chance C(3, 3) / C(4, 3)
    std = math.sqrt(p * (1 - p))
    assert_groups(advantages, [[p / (std + 1e-6), *[-p * 1 / 3 / (std + 1e-6)] * 3], [0, 0], [0]])


def test_passk_training_k_against_the_configured_group_size():
    assert check_passk_k(4, group_size=16) == 4
    with pytest.raises(ValueError, match="k=17 is larger than the group size 16"):
        check_passk_k(17, group_size=16)
    with pytest.raises(ValueError, match="k=16 equals the group size, which gives advantage 0 to every trajectory"):
        check_passk_k(16, group_size=16)


def test_passk_training_k_reaches_it_through_the_config():
    groups = [TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1])], reward=r) for r in [1.0, 0.0, 0.0, 0.0]], group_id="q:solver")]
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="passk_training", estimator_kwargs={"k": 2}))
    np.testing.assert_allclose([t.steps[0].advantage for t in groups[0].trajectories], reference_passk([1, 0, 0, 0], 2))


# --- gpg ----------------------------------------------------------------------------------------


def reference_gpg(groups, f_norm=1.0):
    flat = [r for g in groups for r in g]
    alpha = len(flat) / max(sum(1 for r in flat if r != 0), 1)
    return [np.array([alpha * (r - (sum(g) / len(g) if len(g) > 1 else 0.0)) / f_norm for r in g]) for g in groups]


def test_gpg_hand_worked():
    """5 trajectories, 4 with a non-zero reward: alpha = 5/4; the group of one keeps alpha * r."""
    advantages = run("gpg", [[1.0, 0.0], [0.5, 0.5], [3.0]])
    assert_groups(advantages, [[0.625, -0.625], [0.0, 0.0], [3.75]])
    assert_groups(run("gpg", [[1.0, 0.0], [0.5, 0.5], [3.0]], f_norm=2.0), [[0.3125, -0.3125], [0.0, 0.0], [1.875]])
    assert_groups(run("gpg", [[0.0, 0.0], [0.0]]), [[0.0, 0.0], [0.0]])


def test_gpg_random_groups_against_a_plain_loop():
    for binary in (True, False):
        groups = random_groups(5, binary=binary)
        assert_groups(run("gpg", groups), reference_gpg([list(g) for g in groups]))


@pytest.mark.parametrize("bad", [0, 0.0, float("inf"), float("nan"), "2", True, None])
def test_gpg_rejects_a_bad_f_norm(bad):
    with pytest.raises(ValueError, match=f"estimator 'gpg': f_norm must be a finite non-zero number, got {bad!r}"):
        run("gpg", [[1.0, 0.0]], f_norm=bad)


# --- dr_grpo ------------------------------------------------------------------------------------


def test_dr_grpo_is_grpo_without_the_std_whatever_the_flag():
    groups = random_groups(2)
    expected = [g - g.mean() if len(g) > 1 else g for g in groups]
    assert_groups(run("dr_grpo", groups), expected)
    assert_groups(run("dr_grpo", groups, norm_adv_by_std_in_grpo=False), expected)
    assert_groups(run("grpo", groups, norm_adv_by_std_in_grpo=False), expected)
    assert_groups(run("dr_grpo", [[1, 0, 0, 1], [0.3]]), [[0.5, -0.5, -0.5, 0.5], [0.3]])


# --- verl's names -------------------------------------------------------------------------------


def test_verl_grpo_uses_the_sample_std_and_keeps_verls_group_of_one_rule():
    assert_groups(run("verl_grpo", [[1, 0], [0.3], [2, 2, 2]]), [[0.5 / (math.sqrt(0.5) + EPS), -0.5 / (math.sqrt(0.5) + EPS)], [0.3 / (1 + EPS)], [0, 0, 0]])
    groups = random_groups(4)
    expected = [(g - g.mean()) / (np.std(g, ddof=1) + EPS) if len(g) > 1 else g / (1 + EPS) for g in groups]
    assert_groups(run("verl_grpo", groups), expected)
    assert_groups(run("verl_grpo", groups, norm_adv_by_std_in_grpo=False), [g - g.mean() if len(g) > 1 else g for g in groups])
    assert_groups(run("verl_grpo", [[1, 0]], epsilon=0.5), [[0.5 / (math.sqrt(0.5) + 0.5), -0.5 / (math.sqrt(0.5) + 0.5)]])


def test_verl_rloo_vectorized_gives_a_group_of_one_zero():
    groups = random_groups(6)
    expected = [np.array([r - (sum(g) - r) / (len(g) - 1) for r in g]) if len(g) > 1 else np.zeros(1) for g in groups]
    assert_groups(run("verl_rloo_vectorized", groups), expected)
    assert_groups(run("verl_rloo_vectorized", [[1, 0, 0], [5.0]]), [[1, -0.5, -0.5], [0]])
    assert_groups(run("rloo", [[5.0]]), [[5.0]])


def reference_verl_rpp(groups, lengths):
    """verl's recipe on explicit tokens: centre per group, repeat each value over its tokens, whiten (sample variance + 1e-8)."""
    centred = [r - (sum(g) / len(g) if len(g) > 1 else 0.0) for g in groups for r in g]
    tokens = [c for c, n in zip(centred, lengths, strict=True) for _ in range(int(n))]
    total = len(tokens)
    mean = sum(tokens) / total
    var = sum((t - mean) ** 2 for t in tokens) / (total - 1)
    return np.array([(c - mean) / math.sqrt(var + 1e-8) for c in centred])


def test_verl_reinforce_plus_plus_baseline_worked_example_of_the_semantics_page():
    rewards, lengths = [[1.0, 0.0, 0.5, 0.0], [1.0, 0.0], [1.0]], [4, 2, 3, 1, 1, 3, 2]
    flat = np.concatenate(run("verl_reinforce_plus_plus_baseline", rewards, lengths=np.array(lengths, dtype=float)))
    np.testing.assert_allclose(flat, [0.8220, -0.9920, -0.0850, -0.9920, 0.5952, -1.2188, 1.5022], atol=1e-4)
    np.testing.assert_allclose(flat, reference_verl_rpp(rewards, lengths), rtol=1e-12, atol=1e-12)


def test_verl_reinforce_plus_plus_baseline_random_groups_and_lengths_from_the_steps():
    rng = np.random.default_rng(9)
    groups = random_groups(9)
    lengths = rng.integers(0, 30, sum(len(g) for g in groups))
    expected = reference_verl_rpp([list(g) for g in groups], lengths)
    np.testing.assert_allclose(np.concatenate(run("verl_reinforce_plus_plus_baseline", groups, lengths=lengths)), expected, rtol=1e-10, atol=1e-12)
    rows = iter(lengths.tolist())
    traj_groups = [
        TrajectoryGroup([Trajectory(steps=[Step(response_ids=[0] * next(rows))], reward=float(r)) for r in g], group_id=f"t{i}:solver")
        for i, g in enumerate(groups)
    ]
    collect_reward_and_advantage_from_trajectory_groups(traj_groups, AlgorithmConfig(estimator="verl_reinforce_plus_plus_baseline"))
    got = [t.steps[0].advantage for tg in traj_groups for t in tg.trajectories]
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


def test_verl_reinforce_plus_plus_baseline_needs_valid_lengths():
    with pytest.raises(ValueError, match="needs the response length of every trajectory"):
        batched("verl_reinforce_plus_plus_baseline", [[1.0, 0.0]])
    with pytest.raises(ValueError, match=r"lengths has shape \(3,\), rewards have \(2,\)"):
        batched("verl_reinforce_plus_plus_baseline", [[1.0, 0.0]], lengths=np.ones(3))
    with pytest.raises(ValueError, match=r"trajectory 1 has length -1\.0; lengths must be finite and >= 0"):
        batched("verl_reinforce_plus_plus_baseline", [[1.0, 0.0]], lengths=np.array([2.0, -1.0]))


def test_verl_reinforce_plus_plus_baseline_with_fewer_than_two_tokens_is_zero():
    """verl raises here (a Bessel correction over one token); the estimator gives 0."""
    np.testing.assert_array_equal(batched("verl_reinforce_plus_plus_baseline", [[1.0, 0.0], [3.0]], lengths=np.array([1.0, 0.0, 0.0])), [0, 0, 0])
    np.testing.assert_array_equal(batched("verl_reinforce_plus_plus_baseline", [[2.0]], lengths=np.array([5.0])), [0.0])


@pytest.mark.parametrize(
    ("name", "scale", "rtol"),
    [
        ("maxrl", 1e-30, 1e-9),
        ("maxrl", 1e200, 1e-9),
        ("verl_grpo", 1e-30, 1e-9),
        ("verl_grpo", 1e200, 1e-9),
        ("verl_reinforce_plus_plus_baseline", 1e200, 1e-8),
    ],
)
def test_scale_free_estimators_give_the_same_advantages_for_extreme_magnitudes(name, scale, rtol):
    """Multiplying every reward by a positive constant leaves these advantages unchanged (verl's whitening: up to its
    1e-8 variance floor, 2e-9 relative at scale 1; at 1e-30 the floor dominates, as in verl)."""
    groups = [g for g in random_groups(13) if len(g) > 1]
    lengths = np.arange(1.0, 1.0 + sum(len(g) for g in groups))
    expected = np.concatenate(run(name, groups, lengths=lengths, epsilon=0.0))
    got = np.concatenate(run(name, [g * scale for g in groups], lengths=lengths, epsilon=0.0))
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=1e-12)
