"""The generated targets table of docs/benchmarks.md has a row for every step-level built-in the benchmark holds to a target against ``gigpo``."""

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
    targets = (ROOT / "docs" / "benchmarks.md").read_text().split("## Targets\n", 1)[1].split("\n## ", 1)[0]
    for name in CATALOGUE_TARGETS:
        row = next((line for line in targets.splitlines() if line.startswith(f"| step_level | {name} vs gigpo |")), None)
        assert row is not None, f"docs/benchmarks.md, Targets: no row for {name} vs gigpo"
        assert re.search(rf"\| ≤ {TARGET_VS_GIGPO:g} \| (met|MISSED) \|$", row), row
