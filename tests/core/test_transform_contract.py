"""``check_transform`` (``rllm-plugins check NAME`` for a transform) and the precision of a transform's output on every path.

Each wrong transform below is written plainly and registered for one test; each breaks one rule on inputs the paths
hand a transform: empty groups (TRL's offsets ``[0, 2, 4, 4]``, verl's padding), units without model tokens, float16.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from rllm_plugins import (
    AlgorithmConfig,
    Step,
    Trajectory,
    TrajectoryGroup,
    apply_transforms,
    cli,
    collect_reward_and_advantage_from_trajectory_groups,
    register_advantage_transform,
)
from rllm_plugins.transforms import resolve_transforms, unregister_advantage_transform
from rllm_plugins.transforms.contract import RULES, check_transform
from rllm_plugins.transforms.entries import narrow_dtype

SEQUENCE_RULES = ["group sizes 1-8", "empty groups", "units without model tokens", "shape", "finite", "precision", "no mutation", "deterministic"]


@pytest.fixture
def registered():
    """``register(name, fn, **spec)`` for one test."""
    names: list[str] = []

    def register(name, fn, **spec):
        register_advantage_transform(name, **spec)(fn)
        names.append(name)

    yield register
    for name in names:
        unregister_advantage_transform(name)


def verdicts(name, options=None):
    return {rule: (ok, detail) for rule, ok, detail in check_transform(name, options).results}


def failing(name, options=None):
    return {rule: detail for rule, (ok, detail) in verdicts(name, options).items() if not ok}


@pytest.mark.parametrize(
    ("name", "options"),
    [("clip", {"min": -1.0, "max": 1.0}), ("scale", {"positive": 0.5, "negative": 2.0}), ("whiten", {}), ("codapo", {}), ("kl_shaping", {"coef": 0.1})],
)
def test_the_built_ins_keep_every_rule(name, options):
    report = check_transform(name, options)
    assert report.ok, str(report)
    assert all(rule in RULES for rule, _, _ in report.results)


def test_a_sequence_level_report_has_one_line_per_rule():
    assert list(verdicts("whiten")) == SEQUENCE_RULES
    assert list(verdicts("clip", {"max": 1.0})) == [*SEQUENCE_RULES, "elementwise (per token = per sequence)"]
    token_rules = ["batch shapes", "rows without model tokens", "shape", "finite", "precision", "no mutation", "deterministic", "masked tokens"]
    assert list(verdicts("kl_shaping")) == token_rules


def half_precision(advantages):
    return advantages.astype(np.float16)


FLOAT16_MESSAGE = (
    "advantage transform 'test_half' (user code (tests.core.test_transform_contract.half_precision)) returned advantages of dtype float16, "
    "which holds less than float32 (float16 turns 1.7320508 into 1.732421875): return float64 or the input's dtype"
)


def test_a_float16_output_fails_precision_naming_the_dtype_and_the_fix(registered):
    """Before: every rule passed (the check converted the output to float64 before looking at it)."""
    registered("test_half", half_precision)
    problems = failing("test_half")
    assert list(problems) == ["precision"]
    assert problems["precision"] == FLOAT16_MESSAGE + " (on groups of sizes [3, 5, 4, 7, 6, 1, 2, 8])"


@pytest.mark.parametrize(("dtype", "name"), [(np.int64, "int64"), (np.float16, "float16"), (np.bool_, "bool")])
def test_every_dtype_below_float32_is_named(dtype, name):
    assert narrow_dtype(np.zeros(2, dtype=dtype)) == name


def test_float32_and_wider_pass_and_so_do_lists_of_floats():
    torch = pytest.importorskip("torch")
    for ok in (np.zeros(2, dtype=np.float32), np.zeros(2), [0.5, 1.0], torch.zeros(2, dtype=torch.float32)):
        assert narrow_dtype(ok) is None
    assert narrow_dtype(torch.zeros(2, dtype=torch.bfloat16)) == "torch.bfloat16"
    assert narrow_dtype(torch.zeros(2, dtype=torch.float16)) == "torch.float16"


def test_the_config_time_trial_refuses_a_float16_output(registered):
    """Before: AlgorithmConfig took it, and grpo's 1.7320508 reached the advantages as 1.732421875."""
    registered("test_half", half_precision)
    with pytest.raises(ValueError) as error:
        AlgorithmConfig(advantage_transforms=["test_half"])
    assert str(error.value) == "AlgorithmConfig.advantage_transforms[0]: " + FLOAT16_MESSAGE


def half_on_large_batches(advantages):
    """float64 on the trial's four units, float16 on more: only the run sees it."""
    return advantages.astype(np.float16) if advantages.size > 4 else advantages.copy()


def test_a_run_refuses_a_float16_output_with_the_same_words(registered):
    registered("test_half_large", half_on_large_batches)
    AlgorithmConfig(advantage_transforms=["test_half_large"])  # the trial's four units pass
    provider = "user code (tests.core.test_transform_contract.half_on_large_batches)"
    words = (
        f"advantage transform 'test_half_large' ({provider}) for role 'all_groups' returned advantages of dtype float16, which holds less than "
        "float32 (float16 turns 1.7320508 into 1.732421875): return float64 or the input's dtype"
    )
    with pytest.raises(ValueError) as error:
        apply_transforms(np.array([1.7320508, -0.5773503, -0.5773503, -0.5773503, 0.0]), ["test_half_large"])
    assert str(error.value) == words
    groups = [TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1])], reward=r) for r in [1.0, 0.0, 0.0, 0.0, 0.0]], group_id="q1")]
    with pytest.raises(ValueError, match=re.escape(words)):
        collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="grpo", advantage_transforms=["test_half_large"]))


def group_means_by_reduceat(advantages, *, offsets):
    """Advantages minus their group's mean, with np.add.reduceat: wrong on an empty group (it reads the next group's first value)."""
    starts = np.minimum(offsets[:-1], max(advantages.size - 1, 0))
    means = np.add.reduceat(advantages, starts) / np.maximum(np.diff(offsets), 1)
    return advantages - np.repeat(means, np.diff(offsets))


def test_a_transform_wrong_on_an_empty_group_fails_empty_groups(registered):
    """Before: no input had an empty group, and every rule passed."""
    registered("test_reduceat", group_means_by_reduceat)
    problems = failing("test_reduceat")
    assert list(problems) == ["empty groups"], problems
    assert problems["empty groups"].startswith("an empty group last (sizes [2, 2, 0]): unit 2 got ")


def per_token(advantages, *, lengths):
    """Each advantage divided by its unit's tokens: infinite for a unit without one."""
    with np.errstate(divide="ignore"):
        return advantages / lengths


def test_a_transform_that_divides_by_zero_lengths_fails_finite_on_units_without_model_tokens(registered):
    """Before: every unit had at least one model token, and every rule passed."""
    registered("test_per_token", per_token)
    assert failing("test_per_token") == {"finite": "non-finite output on units without model tokens (sizes [3, 4, 2], 3 of lengths 0)"}


def first_mean(advantages, *, offsets):
    """Each advantage minus the first group's mean: raises on an empty first group."""
    first = advantages[offsets[0] : offsets[1]]
    if first.size == 0:
        raise ValueError("the first group is empty")
    return advantages - first.mean()


def test_a_transform_that_raises_on_an_input_the_paths_hand_it_fails_that_rule(registered):
    """Before: the exception escaped the check (a traceback, no report)."""
    registered("test_first_mean", first_mean)
    assert failing("test_first_mean") == {"empty groups": "raised ValueError: the first group is empty on an empty group first (sizes [0, 3, 2])"}


_draws = itertools.count()


def jitter(advantages):
    return advantages + 1e-9 * next(_draws)


def fixes_lengths(advantages, *, lengths):
    lengths[lengths == 0] = 1.0
    return advantages / lengths


def test_a_transform_that_is_not_deterministic_or_changes_its_context_fails_those_rules(registered):
    registered("test_jitter", jitter)
    registered("test_fixes_lengths", fixes_lengths)
    assert list(failing("test_jitter")) == ["deterministic"]
    assert failing("test_jitter")["deterministic"].startswith("two calls on groups of sizes [3, 5, 4, 7, 6, 1, 2, 8] differ at [0]")
    changed = "the transform changed its context ['lengths'] on units without model tokens (sizes [3, 4, 2], 3 of lengths 0)"
    assert failing("test_fixes_lengths") == {"no mutation": changed}


def test_check_exits_1_and_prints_the_failing_rule(registered, capsys):
    registered("test_half", half_precision)
    assert cli.main(["check", "test_half"]) == 1
    out = capsys.readouterr().out
    assert f"  FAIL precision: {FLOAT16_MESSAGE} (on groups of sizes [3, 5, 4, 7, 6, 1, 2, 8])\n" in out
    assert cli.main(["check", "whiten"]) == 0


def test_a_selected_transform_resolved_without_trial_is_refused_at_run_time_too(registered):
    registered("test_half", half_precision)
    selected = resolve_transforms(["test_half"], "here", trial=False)
    with pytest.raises(ValueError, match=r"returned advantages of dtype float16, which holds less than float32"):
        apply_transforms(np.zeros(3), selected)
