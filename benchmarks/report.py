"""What a benchmark script hands back: Markdown tables, plot series and target checks."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .timing import Table, format_ratio, machine_description

__all__ = ["VERDICTS", "Report", "Target", "follows", "script_main"]


@dataclass(frozen=True)
class Target:
    """One performance target and what was measured for it.

    ``value`` is compared with ``bound`` (``value <= bound`` when ``at_most``, else ``>=``); ``met`` is that
    comparison, or None when nothing could be measured (a framework not installed, a ``--quick`` run).
    ``measured`` and ``goal`` are how the two read in a table.
    """

    name: str
    measured: str
    goal: str
    met: bool | None  # None: could not be measured here
    value: float | None = None
    bound: float | None = None
    at_most: bool = True

    @classmethod
    def check(
        cls, name: str, value: float, bound: float, *, at_most: bool = True, measured: str | None = None, goal: str | None = None, quick: bool = False
    ) -> Target:
        """A target on a ratio (``measured`` and ``goal`` default to ``1.23x`` and ``≤ 1.3x``); not judged in a ``quick`` run."""
        met = None if quick else follows(value, bound, at_most)
        goal = goal if goal is not None else f"{'≤' if at_most else '≥'} {bound:g}x"
        return cls(name, measured if measured is not None else format_ratio(value), goal, met, float(value), float(bound), at_most)

    @classmethod
    def unavailable(cls, name: str, why: str, goal: str) -> Target:
        return cls(name, why, goal, None)

    @property
    def verdict(self) -> str:
        return VERDICTS[self.met]

    def line(self) -> str:
        return f"{self.name}: {self.measured} (target {self.goal}) — {self.verdict}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "measured": self.measured,
            "goal": self.goal,
            "met": self.met,
            "value": self.value,
            "bound": self.bound,
            "at_most": self.at_most,
        }


VERDICTS = {True: "met", False: "MISSED", None: "not measured"}


def follows(value: float, bound: float, at_most: bool) -> bool:
    """Whether ``value`` meets ``bound`` (at most or at least it)."""
    return value <= bound if at_most else value >= bound


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
            "targets": [t.as_dict() for t in self.targets],
        }


def script_main(doc: str, run: Callable[[bool], Report], quick_help: str) -> None:
    """Command line of one benchmark script: ``[--quick]``; prints the machine, then the report."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=quick_help)
    args = parser.parse_args()
    print(f"Machine: {machine_description()}\n")
    print(run(args.quick).markdown())
