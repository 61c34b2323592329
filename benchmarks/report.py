"""What a benchmark script hands back: Markdown tables, plot series and target checks."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .timing import Table, machine_description

__all__ = ["Report", "Target", "script_main"]


@dataclass(frozen=True)
class Target:
    """One performance target of issue 8 and what was measured for it."""

    name: str
    measured: str
    goal: str
    met: bool | None  # None: could not be measured here

    def line(self) -> str:
        verdict = {True: "met", False: "MISSED", None: "not measured"}[self.met]
        return f"{self.name}: {self.measured} (target {self.goal}) — {verdict}"


@dataclass
class Report:
    """Results of one benchmark script."""

    name: str
    tables: list[Table] = field(default_factory=list)
    series: dict[str, dict[str, list[tuple[float, float]]]] = field(default_factory=dict)  # panel -> label -> (x, seconds)
    targets: list[Target] = field(default_factory=list)

    def point(self, panel: str, label: str, x: float, seconds: float) -> None:
        self.series.setdefault(panel, {}).setdefault(label, []).append((x, seconds))

    def markdown(self) -> str:
        parts = [table.markdown() for table in self.tables]
        if self.targets:
            parts.append("Targets:\n\n" + "\n".join(f"- {t.line()}" for t in self.targets) + "\n")
        return "\n".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tables": [{"title": t.title, "columns": list(t.columns), "rows": t.rows, "notes": t.notes} for t in self.tables],
            "series": {panel: {label: [list(p) for p in points] for label, points in lines.items()} for panel, lines in self.series.items()},
            "targets": [{"name": t.name, "measured": t.measured, "goal": t.goal, "met": t.met} for t in self.targets],
        }


def script_main(doc: str, run: Callable[[bool], Report], quick_help: str) -> None:
    """Command line of one benchmark script: ``[--quick]``; prints the machine, then the report."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=quick_help)
    args = parser.parse_args()
    print(f"Machine: {machine_description()}\n")
    print(run(args.quick).markdown())
