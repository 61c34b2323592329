"""The contract checker: every built-in passes, and a deliberately broken estimator for each rule is caught."""

import numpy as np
import pytest

from rllm_plugins import AdvEstimatorSpec, UnknownEstimatorError, rLLMAdvantageEstimator
from rllm_plugins.estimators import BUILTIN_SPECS, calculate_grpo_advantages
from rllm_plugins.estimators.rloo import rloo
from rllm_plugins.testing import RULES, ContractReport, assert_estimator_contract, check_estimator

CHECKED = [spec.name for spec in BUILTIN_SPECS] + ["median_baseline"]


def violated(report: ContractReport) -> set[str]:
    return {v.rule for v in report.violations}


def only_violation(report: ContractReport, rule: str):
    assert violated(report) == {rule}, str(report)
    return report.violations[0]


def centred(rewards):
    return [np.asarray(r, dtype=np.float64) - np.mean(r) for r in rewards]


# --- what passes ----------------------------------------------------------------------------


NEEDED_OPTIONS = {"composite": {"terms": [["grpo", 0.5], ["turn_grpo", 0.25, {"gamma": 0.9}], ["step_reinforce", 0.25]]}}
NO_ANCHORS = {spec.name for spec in BUILTIN_SPECS if spec.level == "step" and not spec.needs_anchors}


@pytest.mark.parametrize("name", CHECKED)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_builtin_and_the_example_plugin_keep_the_contract(name, seed):
    report = assert_estimator_contract(name, seed=seed, options=NEEDED_OPTIONS.get(name))
    assert report.ok
    skipped = {"skipped: the estimator reads no anchor states (needs_anchors=False)"} if name in NO_ANCHORS else set()
    if name == "rae":  # a running baseline: the order of trajectories is its scan order
        skipped = {
            "skipped: declared group_order_invariant=False",
            "skipped: stateful with group_order_invariant=False (the scan order of trajectories matters)",
        }
    if name == "composite":  # its options are its terms (bound here) and a gamma passed on to them (default None)
        skipped |= {"skipped: no option with values to try (str options are not tried)"}
    assert set(report.verdicts.values()) == {"pass"} | skipped


def test_accepts_an_enum_member_a_spec_and_a_plain_function():
    assert check_estimator(rLLMAdvantageEstimator.RLOO).ok
    assert check_estimator(AdvEstimatorSpec("mine", batched=rloo)).ok

    def dr_grpo(rewards, **kwargs):
        advantages = centred(rewards)
        return advantages, advantages

    assert check_estimator(dr_grpo).ok


def test_an_unknown_name_is_a_value_error():
    with pytest.raises(UnknownEstimatorError):
        check_estimator("no_such_estimator")


# --- one broken estimator per rule ----------------------------------------------------------


def test_returning_only_the_advantages_breaks_returns_pair():
    def advantages_only(rewards, **kwargs):
        return centred(rewards)

    report = check_estimator(advantages_only)
    assert {"returns_pair", "group_of_one", "single_group", "empty_group", "empty_input"} == violated(report)  # malformed at every size
    assert "was only one sequence returned?" in report.violations[0].message


def test_dropping_a_group_breaks_returns_pair():
    def drops_last_group(rewards, **kwargs):
        advantages = centred(rewards)[:-1]
        return advantages, advantages

    report = check_estimator(drops_last_group)
    assert "returns_pair" in violated(report)
    assert "has 1 entries for 2 groups" in report.violations[0].message
    assert report.violations[0].example.sizes == [2, 2]


def test_an_estimator_that_raises_fails_returns_pair_and_skips_the_rules_that_need_output():
    def broken(rewards, **kwargs):
        raise RuntimeError("boom")

    report = check_estimator(broken)
    assert "returns_pair" in violated(report)
    assert "RuntimeError: boom" in report.violations[0].message
    assert report.verdicts["deterministic"].startswith("skipped")


def test_dropping_a_trajectory_breaks_group_lengths():
    def drops_last_trajectory(rewards, **kwargs):
        advantages = [a[:-1] for a in centred(rewards)]
        return advantages, advantages

    report = check_estimator(drops_last_trajectory)
    assert {"group_lengths", "group_of_one", "single_group"} <= violated(report)
    violation = next(v for v in report.violations if v.rule == "group_lengths")
    assert "values for a group of" in violation.message
    assert violation.example.sizes == [2, 2]  # shrunk to the smallest general case


def test_dividing_by_a_zero_std_breaks_finite():
    def no_epsilon(rewards, **kwargs):
        advantages = [(r - np.mean(r)) / np.std(r) for r in rewards]
        return advantages, advantages

    with np.errstate(all="ignore"):
        report = check_estimator(no_epsilon)
    violation = next(v for v in report.violations if v.rule == "finite")
    assert "for finite rewards" in violation.message
    assert violation.example.sizes == [2, 2]
    assert any(len(set(g)) == 1 for g in violation.example.rewards)  # the constant group that has std 0


def test_the_minimal_example_keeps_only_what_makes_it_fail():
    def overflows_on_huge_rewards(rewards, **kwargs):
        advantages = [np.where(np.abs(r) > 1e20, np.inf, r) for r in rewards]
        return advantages, advantages

    violation = only_violation(check_estimator(overflows_on_huge_rewards), "finite")
    flat = [r for g in violation.example.rewards for r in g]
    assert violation.example.sizes == [2, 2]
    assert sum(abs(r) > 1e20 for r in flat) == 1
    assert all(r in (0.0, 1.0, -1.0) for r in flat if abs(r) <= 1e20)
    assert set(n for g in violation.example.lengths for n in g) == {1}


def test_random_noise_breaks_deterministic():
    def noisy(rewards, **kwargs):
        rng = np.random.default_rng()
        advantages = [a + rng.normal(0.0, 1e-3, a.size) for a in centred(rewards)]
        return advantages, advantages

    report = check_estimator(noisy)
    violation = only_violation(report, "deterministic")
    assert "two calls on the same input differ" in violation.message
    assert report.verdicts["forms_agree"] == "skipped: not deterministic"


def test_sorting_the_advantages_breaks_permutation_equivariance():
    def sorted_advantages(rewards, **kwargs):
        advantages = [np.sort(a) for a in centred(rewards)]
        return advantages, advantages

    violation = only_violation(check_estimator(sorted_advantages), "permutation_equivariant")
    assert "permuting the trajectories" in violation.message


def test_a_group_index_in_the_advantage_breaks_group_order_invariance():
    def by_position(rewards, **kwargs):
        advantages = [a + g for g, a in enumerate(centred(rewards))]
        return advantages, advantages

    report = check_estimator(by_position)
    assert [v.rule for v in report.violations] == ["group_order_invariant", "empty_group"]  # an empty group moves the groups after it
    assert "group_order_invariant=False" in report.violations[0].message
    declared = check_estimator(AdvEstimatorSpec("by_position", fn=by_position, group_order_invariant=False))
    assert declared.ok
    assert declared.verdicts["group_order_invariant"].startswith("skipped")


def test_centring_the_rewards_in_place_breaks_no_mutation():
    def in_place(rewards, **kwargs):
        for r in rewards:
            r -= r.mean()
        return rewards, rewards

    violation = only_violation(check_estimator(in_place), "no_mutation")
    assert "the list form changed rewards[1] from [0.0, 1.0] to [-0.5, 0.5]" in violation.message  # group 0 shrank to zeros


def test_a_batched_form_that_writes_into_its_values_breaks_no_mutation():
    def in_place(values, offsets, /, **kwargs):
        values *= 2.0
        return values

    def doubling(rewards, **kwargs):
        advantages = [2.0 * r for r in rewards]
        return advantages, advantages

    violation = only_violation(check_estimator(AdvEstimatorSpec("doubling", fn=doubling, batched=in_place)), "no_mutation")
    assert "batched form changed its `values`" in violation.message


def test_n_over_n_minus_one_breaks_group_of_one():
    def unguarded_rloo(rewards, **kwargs):
        advantages = [len(r) / (len(r) - 1) * (r - np.mean(r)) for r in rewards]
        return advantages, advantages

    violation = only_violation(check_estimator(unguarded_rloo), "group_of_one")
    assert "ZeroDivisionError" in violation.message
    assert violation.example.as_dict() == {"rewards": [[0.0]], "lengths": [[1]]}


def test_a_leave_one_group_out_baseline_breaks_single_group():
    def other_groups_baseline(rewards, **kwargs):
        means = np.array([np.mean(r) for r in rewards])
        others = (means.sum() - means) / max(len(rewards) - 1, 0) if len(rewards) > 1 else np.full(len(rewards), np.nan)
        advantages = [r - b for r, b in zip(rewards, others, strict=True)]
        return advantages, advantages

    report = check_estimator(other_groups_baseline)
    violation = next(v for v in report.violations if v.rule == "single_group")
    assert "for finite rewards" in violation.message
    assert violation.example.sizes == [2]
    assert "finite" not in violated(report)


def test_concatenating_no_groups_breaks_empty_input():
    def role_zscore(rewards, **kwargs):
        flat = np.concatenate(rewards)
        advantages = [(r - flat.mean()) / (flat.std() + 1e-6) for r in rewards]
        return advantages, advantages

    violation = only_violation(check_estimator(role_zscore), "empty_input")
    assert "rewards=[]" in violation.message and "ValueError" in violation.message


def test_a_batched_form_that_computes_something_else_breaks_forms_agree():
    mismatched = AdvEstimatorSpec("mismatched", fn=calculate_grpo_advantages, batched=rloo)
    violation = only_violation(check_estimator(mismatched), "forms_agree")
    assert "batched form vs list form" in violation.message


# --- the report -------------------------------------------------------------------------------


def test_the_report_prints_a_verdict_for_every_rule_and_each_violation():
    def advantages_only(rewards, **kwargs):
        return centred(rewards)

    text = str(check_estimator(advantages_only))
    assert "5 violation(s)" in text
    for rule in RULES:
        assert rule in text
    assert "FAIL" in text and "minimal failing example: rewards=" in text


def test_assert_estimator_contract_raises_with_the_report():
    def advantages_only(rewards, **kwargs):
        return centred(rewards)

    with pytest.raises(AssertionError, match="returns_pair: advantages_by_group"):
        assert_estimator_contract(advantages_only)


def test_the_report_keeps_its_columns_aligned_on_skipped_rules_and_gives_the_reason_last():
    def by_position(rewards, **kwargs):
        advantages = [a + g for g, a in enumerate(centred(rewards))]
        return advantages, advantages

    report = check_estimator(AdvEstimatorSpec("by_position", fn=by_position, group_order_invariant=False))
    rows = str(report).splitlines()[1 : 1 + len(RULES)]
    starts = {row.index(description) for row, description in zip(rows, RULES.values(), strict=True)}
    assert len(starts) == 1
    skipped = next(row for row in rows if "group_order_invariant " in row)
    assert skipped.split()[1] == "skipped"
    assert skipped.endswith("(skipped: declared group_order_invariant=False)")
