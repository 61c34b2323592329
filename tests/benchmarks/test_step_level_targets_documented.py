"""The performance table of docs/benchmarks.md (At a glance) has a row for every step-level built-in the benchmark holds to a target against ``gigpo``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_catalogue_target_has_a_row_with_its_goal_and_a_measured_ratio():
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.report import Report
        from benchmarks.step_level import CATALOGUE_TARGETS, TARGET_VS_GIGPO, _catalogue, make_steps, step_batch
    finally:
        sys.path.remove(str(ROOT))
    report = Report("step_level")
    outcomes, rewards, states = make_steps(20, 4, 5)
    _catalogue(report, step_batch(outcomes, rewards, states, 4), quick=True)
    assert [t.name for t in report.targets] == [f"{name} vs gigpo" for name in CATALOGUE_TARGETS]
    glance = (ROOT / "docs" / "benchmarks.md").read_text().split("## At a glance\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in glance.splitlines() if line.startswith("| step level:") and "vs `gigpo`" in line]
    for name in CATALOGUE_TARGETS:
        estimator = name.split(" ", 1)[0]
        row = next((r for r in rows if f"`{estimator}`" in r), None)
        assert row is not None, f"docs/benchmarks.md, At a glance: no step-level row for {estimator}"
        assert re.search(rf"\| [\d.]+x(?: / [\d.]+x)? \| ≤ {TARGET_VS_GIGPO:g}x, (met|MISSED)", row), row
