"""docs/benchmarks.md's tables and verdicts are what benchmarks/results.json gives, and every verdict follows from its numbers.

Nothing here is timed: the stored results are checked against themselves and against the page, and ``--check``
against a report whose target is missed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the benchmarks package lives at the repository root

from benchmarks import docs, run  # noqa: E402
from benchmarks.report import Report, Target  # noqa: E402

PAGE = docs.DOCS.read_text(encoding="utf-8")
RESULTS = docs.load()


def _targets_rows() -> list[list[str]]:
    region = PAGE.split("<!-- benchmarks.docs: targets -->", 1)[1].split("<!-- /benchmarks.docs -->", 1)[0]
    lines = [line for line in region.splitlines() if line.startswith("|")]
    assert lines[0] == "| " + " | ".join(docs.TARGET_COLUMNS) + " |"
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


@pytest.mark.parametrize("page", docs.PAGES, ids=lambda page: page.name)
def test_the_page_is_what_the_stored_results_give(page):
    text = page.read_text(encoding="utf-8")
    assert "<!-- benchmarks.docs: " in text, f"{page.name} is in benchmarks.docs.PAGES but has no generated region"
    assert docs.render(text, RESULTS) == text, f"{page.name} differs from benchmarks/results.json: run `python -m benchmarks.docs`"


def test_a_targets_region_of_one_report_holds_that_reports_targets_only():
    results = {
        "reports": {
            name: {"targets": [{"name": f"{name} target", "measured": "1x", "goal": "≤ 2x", "met": True, "value": 1.0, "bound": 2.0, "at_most": True}]}
            for name in ("core", "step_level")
        }
    }
    text = docs.render("<!-- benchmarks.docs: targets step_level -->\n<!-- /benchmarks.docs -->", results)
    assert "| step_level | step_level target | 1x | 1 | ≤ 2 | met |" in text and "core target" not in text
    with pytest.raises(ValueError, match="unknown generated region 'report'"):
        docs.render("<!-- benchmarks.docs: report -->\n<!-- /benchmarks.docs -->", results)


def test_every_benchmark_has_a_region_and_every_stored_report_is_one_of_them():
    regions = re.findall(r"<!-- benchmarks\.docs: report (\w+) -->", PAGE)
    assert sorted(regions) == sorted(run.BENCHMARKS)
    assert set(RESULTS["reports"]) <= set(regions)


def test_every_stored_report_names_its_machine_versions_and_date():
    for name, report in RESULTS["reports"].items():
        machine = report["machine"]
        assert {"cpu", "cores", "python", "numpy", "torch", "date", "load_average"} <= set(machine), name
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", machine["date"]), name


def test_every_verdict_on_the_page_follows_from_its_value_and_bound():
    rows = _targets_rows()
    assert len(rows) == sum(len(report["targets"]) for report in RESULTS["reports"].values())
    for benchmark, target, _, value, bound, verdict in rows:
        if value == "—":
            assert verdict == "not measured", target
            continue
        relation, limit = bound.split(" ")
        met = float(value) <= float(limit) if relation == "≤" else float(value) >= float(limit)
        assert verdict == ("met" if met else "MISSED"), f"{benchmark}: {target}"


def test_every_stored_verdict_follows_from_its_stored_value_and_bound():
    for name, report in RESULTS["reports"].items():
        for t in report["targets"]:
            if t["value"] is None or t["met"] is None:
                continue
            assert t["met"] == (t["value"] <= t["bound"] if t["at_most"] else t["value"] >= t["bound"]), f"{name}: {t['name']}"


@pytest.mark.parametrize(("value", "status"), [(1.2, None), (1.4, 1)])
def test_check_exits_with_status_1_when_a_target_is_missed(monkeypatch, capsys, value, status):
    def fake(quick: bool) -> Report:
        report = Report("fake")
        report.targets.append(Target.check("fake vs its floor", value, 1.3))
        return report

    monkeypatch.setitem(run.BENCHMARKS, "fake", fake)  # seen by this process only
    if status is None:
        run.main(["--only", "fake", "--check", "--torch-threads", "0", "--same-process"])
        return
    with pytest.raises(SystemExit) as exit_:
        run.main(["--only", "fake", "--check", "--torch-threads", "0", "--same-process"])
    assert exit_.value.code == status
    assert "fake vs its floor: 1.4x (target ≤ 1.3x) — MISSED" in capsys.readouterr().err


def test_render_rewrites_only_the_generated_regions():
    results = {"reports": {"verl": {"machine": {"cpu": "X", "cores": 2, "python": "3", "numpy": "2", "date": "d"}, "seconds": 1, "tables": [], "targets": []}}}
    text = "hand\n<!-- benchmarks.docs: report verl -->\nold\n<!-- /benchmarks.docs -->\nhand too\n"
    assert (
        docs.render(text, results)
        == "hand\n<!-- benchmarks.docs: report verl -->\n\nMeasured on X, 2 logical cores, Python 3, numpy 2, d (1 s).\n\n<!-- /benchmarks.docs -->\nhand too\n"
    )


def test_each_report_runs_in_a_fresh_process(monkeypatch):
    """docs/benchmarks.md: "Each report runs in a fresh process": one registered only in this process is unknown there."""

    def fake(quick: bool) -> Report:
        return Report("fake")

    monkeypatch.setitem(run.BENCHMARKS, "fake", fake)
    assert run._run_one("fake", True).name == "fake"
    with pytest.raises(KeyError, match="fake"):
        run._run_fresh("fake", True, 1)
    assert run._run_fresh("startup", True, 1).name == "startup"
    assert "Each report runs in a fresh process" in PAGE
