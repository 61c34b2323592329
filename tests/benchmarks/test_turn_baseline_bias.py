"""The bias measurement of docs/turn_level.md: signs as the page says, and its table is what the benchmark computes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.turn_baseline_bias import ESTIMATORS, table

DOC = Path(__file__).resolve().parents[2] / "docs" / "turn_level.md"
CS = (0.0, 0.5, 1.0, 2.0)
BIASED = ("per-turn-index sum (RFC's construction)", "turn_grpo value=reward ended=present", "turn_credit (score: intermediate reward so far)")
UNBIASED = ("rloo (return)", "turn_grpo value=return (default)", "gigpo, turn index as anchor")


@pytest.fixture(scope="module")
def results():
    return table(CS)


def test_biased_estimators_push_towards_more_turns_and_unbiased_ones_stay_at_zero(results):
    assert set(BIASED) | set(UNBIASED) == set(ESTIMATORS)
    for name in BIASED:
        for c, (bias, se) in zip(CS, results[name], strict=True):
            assert (bias > 20 * se) if c > 0 else (abs(bias) < 3 * se), (name, c, bias, se)
        assert [b for b, _ in results[name]] == sorted(b for b, _ in results[name])  # growing with c
    for name in UNBIASED:
        for c, (bias, se) in zip(CS, results[name], strict=True):
            assert abs(bias) < 2 * se, (name, c, bias, se)


def test_the_pages_table_is_the_benchmarks(results):
    section = DOC.read_text().split("## Learned stopping: which per-turn baselines are biased", 1)[1]
    rows = {name: re.findall(r"([+-]\d\.\d{4}) ± (\d\.\d{4})", cells) for name, cells in re.findall(r"^\| ([^|]+?) \| (.*) \|$", section, re.M)}
    for name, points in results.items():
        assert rows[name] == [(f"{b:+.4f}", f"{se:.4f}") for b, se in points], name
