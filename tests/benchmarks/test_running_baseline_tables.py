"""The running-baseline numbers in docs/benchmarks.md and docs/running_baselines.md are the benchmark's tables.

Timings cannot be re-measured in a test, so what is checked is what can be wrong by hand: the tables have the
benchmark's titles, columns and row labels (its full-run sizes), each ratio is the quotient of the times in its
row, and docs/running_baselines.md quotes the numbers of docs/benchmarks.md (whose tables and
verdicts are generated: ``test_docs_generated.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks import running_baseline

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = (ROOT / "docs" / "benchmarks.md").read_text()
SECTION = BENCHMARKS.split("## 7. Running baseline", 1)[1].split("\n## ", 1)[0]
DASH = "\u2013"  # the README's range dash
UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}


def seconds(cell: str) -> float:
    number, unit = cell.split()
    return float(number) * UNITS[unit]


def ratio(cell: str) -> float:
    return float(cell.rstrip("x"))


def lines(text: str, title: str) -> list[str]:
    """The lines of the Markdown table under ``### title`` in ``text`` (header first)."""
    return text.split(f"### {title}\n", 1)[1].lstrip("\n").split("\n\n", 1)[0].splitlines()


def table(text: str, title: str) -> list[list[str]]:
    """The rows of the Markdown table under ``### title`` in ``text``."""
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines(text, title)[2:]]


@pytest.fixture(scope="module")
def report():
    if "Not stored yet" in SECTION:
        pytest.skip("benchmarks/results.json holds no running_baseline report yet (make bench ARGS=--only=running_baseline)")
    return running_baseline.run(quick=True)  # titles and columns (quick sizes differ only in the rows)


def test_the_tables_have_the_benchmarks_titles_columns_and_full_run_rows(report):
    for bench in report.tables:
        title = re.sub(r"[\d,]+ task baselines", f"{running_baseline.CHECKPOINT_TASKS:,} task baselines", bench.title)
        assert f"### {title}\n" in SECTION, title
        header = lines(SECTION, title)[0]
        assert header == "| " + " | ".join(bench.columns) + " |"
    loop = table(SECTION, report.tables[0].title)
    assert [(r[0], r[1]) for r in loop] == [(k, f"{n:,}") for k in ("role", "task") for n in running_baseline.BATCH_SIZES]
    sizes = table(SECTION, report.tables[1].title)
    assert [r[0] for r in sizes] == [f"{n:,}" for n in running_baseline.STATE_SIZES]


def test_every_ratio_is_the_quotient_of_its_rows_times(report):
    for key_by, _, loop, checked, rae, speedup, vs_checked in table(SECTION, report.tables[0].title):
        assert ratio(speedup) == pytest.approx(seconds(loop) / seconds(rae), rel=0.015), key_by
        assert ratio(vs_checked) == pytest.approx(seconds(checked) / seconds(rae), rel=0.015), key_by
    rows = table(SECTION, report.tables[1].title)
    for _, call, growth in rows:
        assert ratio(growth) == pytest.approx(seconds(call) / seconds(rows[0][1]), rel=0.015)


def test_the_running_baselines_page_points_to_the_generated_tables_and_quotes_none():
    page = (ROOT / "docs" / "running_baselines.md").read_text()
    assert "benchmarks.md#7-running-baseline-rae" in page
    for bench in running_baseline.run(quick=True).tables:
        assert f"### {bench.title}" not in page


def test_the_trl_two_process_table_is_the_benchmarks_and_its_ratio_its_times():
    from benchmarks import trl_state_sync

    page = (ROOT / "docs" / "running_baselines.md").read_text()
    header = lines(page, trl_state_sync.TITLE)[0]
    assert header == "| " + " | ".join(trl_state_sync.COLUMNS) + " |"
    rows = table(page, trl_state_sync.TITLE)
    assert [r[0] for r in rows] == ["64", "200,000"] and all(r[5] == "yes" for r in rows)
    steps = [seconds(r[1]) + seconds(r[2]) for r in rows]
    assert ratio(rows[1][3]) == pytest.approx(steps[1] / steps[0], rel=0.015)
