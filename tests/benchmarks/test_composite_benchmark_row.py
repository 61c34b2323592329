"""The step-level report measures composite against its terms called alone, with its target (nothing here is timed; the docs' rows are generated)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the benchmarks package lives at the repository root

from benchmarks.report import Report  # noqa: E402
from benchmarks.step_level import COMPOSITE_VS_TERMS, TARGET_COMPOSITE, _composite_overhead, make_steps, step_batch  # noqa: E402


def test_the_benchmark_reports_composite_against_its_terms_with_the_targets_bound():
    report = Report("step_level")
    _composite_overhead(report, step_batch(*make_steps(20, 8, 10), 8), quick=True)  # also checks composite equals the sum of its terms
    [target] = report.targets
    assert target.name == COMPOSITE_VS_TERMS and target.goal == f"≤ {TARGET_COMPOSITE:g}x"
    assert [row[0] for row in report.tables[0].rows] == ["gigpo", "grpo (outcome level, on the trajectories)", "composite (gigpo + 2 grpo)"]
