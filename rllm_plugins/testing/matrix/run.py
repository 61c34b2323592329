"""Running the matrix: every (estimator, path, relation) cell, its verdict, and the table of cells.

Verdicts: ``PASS``; ``FAIL`` (with the first difference found); ``n.a.`` (the pair has nothing to check, with
why); ``declared`` (the estimator's spec declares it breaks the relation, and it does); ``known`` (listed in
:data:`.known.KNOWN_FAILURES`, and it fails).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .estimators import EstimatorEntry
from .known import KNOWN_FAILURES
from .paths import Call, Path
from .relations import RELATIONS, Budget, NotApplicable, Relation

__all__ = ["Cell", "run_cell", "run_matrix", "summary"]

STATUSES = ("PASS", "FAIL", "n.a.", "declared", "known")


@dataclass(frozen=True)
class Cell:
    """The verdict of one (estimator, path, relation): ``status`` in :data:`STATUSES` and the why."""

    estimator: str
    path: str
    relation: str
    status: str
    message: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.estimator, self.path, self.relation)

    def __str__(self) -> str:
        return f"{self.estimator} x {self.path} x {self.relation}: {self.status}" + (f" ({self.message})" if self.message else "")


def run_cell(entry: EstimatorEntry, path: Path, relation: Relation, budget: Budget) -> Cell:
    """Check one relation of one estimator on one path; never raises for a misbehaving estimator or path."""
    reason = path.not_applicable(Call(entry.name, entry.options))
    if reason:
        return Cell(entry.name, path.name, relation.name, "n.a.", reason)
    try:
        message = relation.check(entry, path, budget)
    except NotApplicable as e:
        return Cell(entry.name, path.name, relation.name, "n.a.", str(e))
    except Exception as e:  # a raw exception is a finding, reported in the cell
        message = f"raised {type(e).__name__}: {e}"
    if not message:
        return Cell(entry.name, path.name, relation.name, "PASS")
    if relation.name in entry.breaks:
        return Cell(entry.name, path.name, relation.name, "declared", entry.breaks[relation.name])
    known = KNOWN_FAILURES.get((entry.name, path.name, relation.name))
    if known:
        return Cell(entry.name, path.name, relation.name, "known", f"{known}: {message}")
    return Cell(entry.name, path.name, relation.name, "FAIL", message)


def run_matrix(entries: Iterable[EstimatorEntry], paths: Sequence[Path], budget: Budget, relations: Sequence[Relation] = RELATIONS) -> list[Cell]:
    """Every cell of ``entries`` x ``paths`` x ``relations``, estimator-major."""
    return [run_cell(entry, path, relation, budget) for entry in entries for path in paths for relation in relations]


def summary(cells: Sequence[Cell]) -> dict[str, int]:
    """How many cells have each status."""
    return {status: sum(c.status == status for c in cells) for status in STATUSES}
