"""The contract's ``empty_group`` rule: an empty group among non-empty ones (what ``normalize_then_sum`` hands an estimator
where no member of a group has a reward key) gets no value and changes no other group's; docs/plugins.md's example keeps it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from rllm_plugins.testing import check_estimator

DOC = (Path(__file__).resolve().parents[2] / "docs" / "plugins.md").read_text()


def docs_max_baseline():
    """The function of docs/plugins.md's decorator-style example, defined without registering it."""
    block = re.search(r'@register_rllm_adv_estimator\("max_baseline"\)\n(def max_baseline.*?return advantages, advantages)\n', DOC, re.S)[1]
    namespace: dict = {}
    exec(block, namespace)
    return namespace["max_baseline"]


def test_the_docs_max_baseline_keeps_every_rule_an_empty_group_included():
    """Before: it passed every rule, then raised numpy's "zero-size array to reduction operation maximum" at the first GDPO step."""
    report = check_estimator(docs_max_baseline())
    assert report.ok, str(report)
    assert report.verdict("empty_group") == ("pass", "")
    advantages, _ = docs_max_baseline()([np.array([1.0, 3.0]), np.array([]), np.array([2.0])])
    assert [a.tolist() for a in advantages] == [[-2.0, 0.0], [], [0.0]]


def test_an_estimator_that_fails_on_an_empty_group_breaks_the_rule_with_numpys_error_named():
    def unguarded(rewards, **_):
        advantages = [r - r.max() for r in rewards]
        return advantages, advantages

    report = check_estimator(unguarded)
    (violation,) = report.violations
    assert violation.rule == "empty_group"
    assert violation.message == (
        "with an empty group (normalize_then_sum hands one where no member has a reward key): "
        "raised ValueError: zero-size array to reduction operation maximum which has no identity"
    )


def test_an_estimator_whose_output_depends_on_an_empty_group_breaks_the_rule():
    def per_group_count(rewards, **_):
        """r - mean, divided by the number of groups (an empty one counted)."""
        advantages = [(r - r.mean() if r.size else r) / len(rewards) for r in rewards]
        return advantages, advantages

    report = check_estimator(per_group_count)
    assert [v.rule for v in report.violations] == ["empty_group"]
    assert report.violations[0].message.startswith("the empty group changed the other groups' advantages (groups numbered without it): group 0")
