"""Every row of DESIGN.md's semantics table, against independent per-group numpy computations."""

import re

import numpy as np
import pytest

from rllm_plugins import (
    calculate_grpo_advantages,
    calculate_grpo_advantages_per_group,
    calculate_prpo_advantages,
    calculate_reinforce_advantages,
    calculate_reinforce_plus_plus_baseline_advantages,
    calculate_rloo_advantages,
    calculate_rloo_advantages_per_group,
    get_rllm_adv_estimator,
)
from rllm_plugins.estimators import BUILTIN_SPECS

EPS = 1e-6
BUILTINS = [spec.name for spec in BUILTIN_SPECS if spec.level == "outcome" and not spec.stateful]  # step-level: tests/steps; stateful: test_rae_*
GROUPS = [np.array([1.0, 0.0, 0.0, 1.0]), np.array([0.3]), np.array([2.0, 2.0, 2.0]), np.array([-1.5, 4.0])]


def reference_grpo(group, norm=True):
    mean, std = (0.0, 1.0) if len(group) <= 1 else (sum(group) / len(group), float(np.sqrt(np.mean((group - np.mean(group)) ** 2))))
    centred = group - mean
    return centred / (std + EPS) if norm else centred


def reference_rloo(group):
    n = len(group)
    if n == 1:
        return group.copy()
    return np.array([r - (group.sum() - r) / (n - 1) for r in group])


def assert_groups_close(actual, expected):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-9, atol=1e-12)


def test_grpo_uses_population_std_and_eps():
    advantages, returns = calculate_grpo_advantages(GROUPS)
    assert_groups_close(advantages, [reference_grpo(g) for g in GROUPS])
    assert_groups_close(returns, advantages)
    scaled = 0.5 / (0.5 + EPS)  # [1, 0, 0, 1]: mean 0.5, population std 0.5 (sample std would be 0.577)
    np.testing.assert_allclose(advantages[0], [scaled, -scaled, -scaled, scaled])


def test_grpo_group_of_one_uses_mean_zero_std_one():
    advantages, _ = calculate_grpo_advantages([np.array([0.3])])
    np.testing.assert_allclose(advantages[0], [0.3 / (1 + EPS)])


def test_grpo_zero_variance_group_gives_zero():
    advantages, _ = calculate_grpo_advantages([np.array([2.0, 2.0, 2.0])])
    np.testing.assert_array_equal(advantages[0], [0.0, 0.0, 0.0])


def test_grpo_without_std_normalisation_only_centres():
    advantages, _ = calculate_grpo_advantages(GROUPS, norm_adv_by_std_in_grpo=False)
    assert_groups_close(advantages, [reference_grpo(g, norm=False) for g in GROUPS])
    np.testing.assert_allclose(advantages[1], [0.3])  # group of 1: mean 0


def test_reinforce_is_the_reward():
    advantages, returns = calculate_reinforce_advantages(GROUPS)
    assert_groups_close(advantages, GROUPS)
    assert_groups_close(returns, GROUPS)


def test_rloo_leave_one_out_and_group_of_one_keeps_reward():
    advantages, returns = calculate_rloo_advantages(GROUPS)
    assert_groups_close(advantages, [reference_rloo(g) for g in GROUPS])
    np.testing.assert_allclose(advantages[1], [0.3])
    assert_groups_close(returns, advantages)


def test_reinforce_plus_plus_baseline_whitens_the_centred_rewards_over_the_role():
    centred = [g - (g.mean() if len(g) > 1 else 0.0) for g in GROUPS]
    flat = np.concatenate(centred)
    mean, std = flat.mean(), np.sqrt(np.mean((flat - flat.mean()) ** 2))
    advantages, _ = calculate_reinforce_plus_plus_baseline_advantages(GROUPS)
    assert_groups_close(advantages, [(c - mean) / (std + EPS) for c in centred])
    assert abs(np.concatenate(advantages).mean()) < 1e-12  # re-centred: a group of one moves the role mean


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        ([[1.0]], [[0.0]]),  # one trajectory: centred 1, whitened (1 - 1) / (0 + eps) = 0
        ([[1.0], [1.0], [1.0], [1.0]], [[0.0]] * 4),  # equal singletons: zero spread, 0 (not 1 / eps = 1e6)
        ([[1.0], [0.0]], [[0.5 / (0.5 + EPS)], [-0.5 / (0.5 + EPS)]]),  # singletons of different rewards: a z-score
        ([[1.0, 0.0], [0.6, 0.4]], [[0.5 / (0.13**0.5 + EPS), -0.5 / (0.13**0.5 + EPS)], [0.1 / (0.13**0.5 + EPS), -0.1 / (0.13**0.5 + EPS)]]),
    ],
)
def test_reinforce_plus_plus_baseline_is_bounded_for_groups_of_one(groups, expected):
    advantages, _ = calculate_reinforce_plus_plus_baseline_advantages([np.array(g) for g in groups])
    assert_groups_close(advantages, [np.array(e) for e in expected])


def test_prpo_is_a_role_level_z_score():
    flat = np.concatenate(GROUPS)
    advantages, _ = calculate_prpo_advantages(GROUPS)
    assert_groups_close(advantages, [(g - flat.mean()) / (flat.std() + EPS) for g in GROUPS])


@pytest.mark.parametrize("name", BUILTINS)
def test_empty_input_gives_two_empty_lists(name):
    assert get_rllm_adv_estimator(name)([]) == ([], [])


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin_returns_a_tuple_of_two_aligned_sequences(name):
    result = get_rllm_adv_estimator(name)(rewards=GROUPS, lengths=np.arange(1.0, 11.0))
    assert isinstance(result, tuple) and len(result) == 2
    for part in result:
        assert [len(a) for a in part] == [len(g) for g in GROUPS]


def test_per_group_helpers_accept_both_epsilon_spellings():
    rewards = np.array([1.0, 0.0])
    spec_spelling, _ = calculate_grpo_advantages_per_group(rewards, True, 0.5)
    keyword, _ = calculate_grpo_advantages_per_group(rewards, epsilon=0.5)
    np.testing.assert_allclose(spec_spelling, [0.5 / 1.0, -0.5 / 1.0])
    np.testing.assert_allclose(keyword, spec_spelling)


def test_rloo_per_group_helper_always_returns_a_tuple():
    advantages, returns = calculate_rloo_advantages_per_group(np.array([0.7]))
    np.testing.assert_allclose(advantages, [0.7])
    np.testing.assert_allclose(returns, [0.7])


def test_opo_uses_a_length_weighted_baseline():
    rewards, lengths = [np.array([1.0, 0.0, 0.5]), np.array([2.0])], np.array([2.0, 6.0, 2.0, 9.0])
    baseline = (2 * 1.0 + 6 * 0.0 + 2 * 0.5) / 10
    advantages, _ = get_rllm_adv_estimator("opo")(rewards=rewards, lengths=lengths)
    np.testing.assert_allclose(advantages[0], [1.0 - baseline, -baseline, 0.5 - baseline])
    np.testing.assert_allclose(advantages[1], [2.0])


def test_opo_without_lengths_says_what_it_needs():
    with pytest.raises(ValueError, match=r"opo.*response length"):
        get_rllm_adv_estimator("opo")(rewards=[np.array([1.0, 0.0])])


def test_grpo_passk_credits_only_the_best():
    rewards = np.array([0.2, 1.0, 0.5, 1.0])
    advantages, _ = get_rllm_adv_estimator("grpo_passk")(rewards=[rewards, np.array([3.0])])
    np.testing.assert_allclose(advantages[0], [0.0, 0.0 / (rewards.std() + EPS), 0.0, 0.0])  # tie: gap 0
    advantages, _ = get_rllm_adv_estimator("grpo_passk")(rewards=[np.array([0.2, 1.0, 0.5])])
    np.testing.assert_allclose(advantages[0], [0.0, 0.5 / (np.std([0.2, 1.0, 0.5]) + EPS), 0.0])


def test_trl_grpo_matches_trl_formula():
    group = np.array([1.0, 0.0, 0.5, 0.5])
    advantages, _ = get_rllm_adv_estimator("trl_grpo")(rewards=[group, np.array([4.0])])
    np.testing.assert_allclose(advantages[0], (group - group.mean()) / (group.std(ddof=1) + 1e-4))
    np.testing.assert_allclose(advantages[1], [0.0])


def test_trl_grpo_batch_uses_the_sample_std_of_all_rewards():
    groups = [np.array([1.0, 0.0]), np.array([3.0, 5.0])]
    flat = np.concatenate(groups)
    advantages, _ = get_rllm_adv_estimator("trl_grpo_batch")(rewards=groups)
    assert_groups_close(advantages, [(g - g.mean()) / (flat.std(ddof=1) + 1e-4) for g in groups])


@pytest.mark.parametrize("scale_rewards", ["batch", "group", "none", True, False])
def test_trl_grpo_follows_scale_rewards(scale_rewards):
    groups = [np.array([1.0, 0.0, 0.25]), np.array([3.0, 5.0]), np.array([2.0])]
    flat = np.concatenate(groups)
    scale = {"group": [g.std(ddof=1) + 1e-4 if g.size > 1 else np.inf for g in groups], "batch": [flat.std(ddof=1) + 1e-4] * 3, "none": [1.0] * 3}
    mode = {True: "group", False: "none"}.get(scale_rewards, scale_rewards)
    advantages, _ = get_rllm_adv_estimator("trl_grpo")(rewards=groups, scale_rewards=scale_rewards)
    assert_groups_close(advantages, [(g - g.mean()) / s for g, s in zip(groups, scale[mode], strict=True)])


def test_trl_grpo_unscaled_when_norm_is_off_and_rejects_batch_with_it():
    groups = [np.array([1.0, 0.0, 0.25]), np.array([3.0, 5.0])]
    advantages, _ = get_rllm_adv_estimator("trl_grpo")(rewards=groups, norm_adv_by_std_in_grpo=False)
    assert_groups_close(advantages, [g - g.mean() for g in groups])
    with pytest.raises(ValueError, match=r"scale_rewards='batch' divides by the batch std but norm_adv_by_std_in_grpo=False asks for no scaling"):
        get_rllm_adv_estimator("trl_grpo")(rewards=groups, scale_rewards="batch", norm_adv_by_std_in_grpo=False)


@pytest.mark.parametrize("scale_rewards", ["group", "none", True, False])
def test_trl_grpo_batch_rejects_any_other_scale_rewards(scale_rewards):
    with pytest.raises(ValueError, match=rf"trl_grpo_batch scales by the batch std, but scale_rewards={re.escape(repr(scale_rewards))}: choose trl_grpo"):
        get_rllm_adv_estimator("trl_grpo_batch")(rewards=[np.array([1.0, 0.0])], scale_rewards=scale_rewards)


@pytest.mark.parametrize("bad", ["Group", "global", 1, None])
def test_trl_grpo_rejects_unknown_scale_rewards(bad):
    with pytest.raises(ValueError, match=rf"scale_rewards must be 'group', 'batch', 'none', True or False, got {re.escape(repr(bad))}"):
        get_rllm_adv_estimator("trl_grpo")(rewards=[np.array([1.0, 0.0])], scale_rewards=bad)


@pytest.mark.parametrize("bad, where", [([np.array([1.0, np.nan])], "group 0, trajectory 1"), ([np.array([1.0]), [0.0, None]], "group 1")])
def test_list_form_rejects_non_finite_and_missing_rewards_naming_the_place(bad, where):
    with pytest.raises(ValueError, match=where):
        calculate_grpo_advantages(bad)
