"""The docs' benchmark tables and verdicts, generated from the stored results: ``python -m benchmarks.docs [--check]``.

``make bench`` (``python -m benchmarks.run --store benchmarks/results.json``) stores each report it runs, with the
machine, versions and date it ran on, in :data:`RESULTS`, and rewrites the generated regions of each of :data:`PAGES`:

- ``<!-- benchmarks.docs: targets -->`` … ``<!-- /benchmarks.docs -->``: every stored target, its value, bound and
  verdict (derived here from the value and the bound, not copied); ``targets NAME``: those of report NAME only;
- ``<!-- benchmarks.docs: report NAME -->`` … ``<!-- /benchmarks.docs -->``: where and when report NAME ran, and its tables.

Everything outside those regions is written by hand. ``--check`` exits with status 1 when a page differs from what
the stored results give (an edited table, results stored without regenerating).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from .report import VERDICTS, follows
from .timing import Table, describe_machine

__all__ = ["DOCS", "PAGES", "RESULTS", "load", "render", "store", "verdict", "write"]

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results.json"
DOCS = ROOT / "docs" / "benchmarks.md"
PAGES = (DOCS, ROOT / "docs" / "turn_level.md")  # every page with generated regions
REGION = re.compile(r"(<!-- benchmarks\.docs: (?P<what>[^>]*?) -->\n)(?P<body>.*?)(<!-- /benchmarks\.docs -->)", re.DOTALL)
TARGET_COLUMNS = ("benchmark", "target", "measured", "value", "bound", "verdict")


def load(path: Path = RESULTS) -> dict[str, Any]:
    """The stored results: ``{"reports": {name: {"machine": {...}, "seconds": s, "tables": [...], "targets": [...]}}}``."""
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"reports": {}}


def store(reports: dict[str, dict[str, Any]], path: Path = RESULTS) -> None:
    """Merge ``reports`` (name -> stored report) into the results at ``path``: reports of the same name are replaced."""
    results = load(path)
    results["reports"].update(reports)
    path.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def verdict(target: dict[str, Any]) -> str:
    """``met``, ``MISSED`` or ``not measured``, from the stored value and bound."""
    if target.get("value") is None or target.get("bound") is None or target.get("met") is None:
        return VERDICTS[None]
    return VERDICTS[follows(target["value"], target["bound"], target["at_most"])]


def _bound(target: dict[str, Any]) -> str:
    return "—" if target.get("bound") is None else f"{'≤' if target['at_most'] else '≥'} {target['bound']:.6g}"


def _targets(results: dict[str, Any], only: str | None = None) -> str:
    """Every stored target (``only``: those of that report) as a table, its verdict derived from its value and bound."""
    table = Table("Targets", TARGET_COLUMNS)
    for name, report in results["reports"].items():
        if only is not None and name != only:
            continue
        for t in report["targets"]:
            value = "—" if t.get("value") is None else f"{t['value']:.6g}"
            table.add(name, t["name"], t["measured"], value, _bound(t), verdict(t))
    lines = table.markdown().splitlines()[2:]  # the page gives the heading
    return "\n".join(lines) + "\n"


def _report(name: str, results: dict[str, Any]) -> str:
    report = results["reports"].get(name)
    if report is None:
        return f"Not stored yet: run `make bench ARGS=--only={name}`.\n"
    parts = [f"Measured on {describe_machine(report['machine'])} ({report['seconds']} s).\n"]
    for t in report["tables"]:
        table = Table(t["title"], t["columns"], [list(row) for row in t["rows"]], list(t["notes"]))
        parts.append(table.markdown())
    return "\n".join(parts)


def render(text: str, results: dict[str, Any]) -> str:
    """``text`` with every generated region rewritten from ``results``."""

    def body(match: re.Match[str]) -> str:
        what = match["what"].strip()
        kind, _, name = what.partition(" ")
        if kind == "targets":
            generated = _targets(results, name.strip() or None)
        elif kind == "report" and name.strip():
            generated = _report(name.strip(), results)
        else:
            raise ValueError(f"unknown generated region {what!r} (known: 'targets', 'targets NAME', 'report NAME')")
        return f"{match[1]}\n{generated}\n{match[4]}"

    return REGION.sub(body, text)


def write(results: Path = RESULTS, pages: tuple[Path, ...] = PAGES) -> None:
    """Rewrite the generated regions of ``pages`` from the results stored at ``results``."""
    stored = load(results)
    for page in pages:
        page.write_text(render(page.read_text(encoding="utf-8"), stored), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the page is what the stored results give")
    args = parser.parse_args(argv)
    if not args.check:
        write()
        return
    stale = [page for page in PAGES if page.read_text(encoding="utf-8") != render(page.read_text(encoding="utf-8"), load())]
    if stale:
        print(f"{', '.join(map(str, stale))} differ from {RESULTS}: run `python -m benchmarks.docs`", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
