"""docs/turn_level.md's row for composite's overhead names what ``benchmarks.step_level`` measures, with its target (nothing here is timed)."""

from __future__ import annotations

import re
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


def test_the_turn_level_page_row_states_that_target():
    for page in ("docs/turn_level.md",):  # docs/benchmarks.md's verdicts are generated: test_docs_generated.py
        rows = [line for line in (ROOT / page).read_text().splitlines() if re.match(r"\| (step level: )?`composite`", line) and "called alone" in line]
        assert len(rows) == 1, page
        assert "`gigpo` + 2 `grpo`" in rows[0] and f"≤ {TARGET_COMPOSITE:g}x" in rows[0], rows[0]
        measured = [float(x) for x in re.findall(r"(\d+\.\d+)x", rows[0].split("|")[2])]
        met = max(measured) <= TARGET_COMPOSITE
        if page != "docs/turn_level.md":  # its table has no verdict column
            assert ("met" if met else "MISSED") in rows[0].split("|")[3], rows[0]
        assert met or "MISSED" in rows[0], rows[0]
