"""One estimator through every installed path and wrapper: its cells as a table (``rllm-plugins check NAME --paths``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from ...tables import format_table
from .estimators import entry_of
from .paths import path_table
from .relations import FAST, RELATIONS, Budget
from .run import Cell, run_matrix, summary

__all__ = ["check_paths", "cells_as_dicts", "cells_table"]


def check_paths(name: str, *, options: Mapping[str, Any] | None = None, budget: Budget = FAST, seed: int | None = None) -> list[Cell]:
    """Every cell of the registered estimator ``name`` (with ``options``, else its sample options) on every installed path;
    ``seed``: the samples' seed instead of the budget's."""
    entry = entry_of(name)
    if seed is not None:
        budget = replace(budget, seeds=(seed,))
    if options is not None:
        entry = replace(entry, options=MappingProxyType(dict(options)))
    return run_matrix([entry], path_table(), budget)


def cells_table(cells: Sequence[Cell]) -> str:
    """One row per path, one column per relation, each cell's status; then every cell that did not pass, with why."""
    relations = [r.name for r in RELATIONS if any(c.relation == r.name for c in cells)]
    paths = list(dict.fromkeys(c.path for c in cells))
    status = {(c.path, c.relation): c.status for c in cells}
    rows = [[path, *(status.get((path, relation), "-") for relation in relations)] for path in paths]
    counts = summary(cells)
    lines = [format_table(["PATH", *relations], rows), "", ", ".join(f"{n} {s}" for s, n in counts.items() if n) + f" of {len(cells)} cells"]
    for cell in cells:
        if cell.status in ("FAIL", "known", "declared"):
            lines.append(f"{cell.status}: {cell.path} x {cell.relation}: {cell.message}")
    return "\n".join(lines)


def cells_as_dicts(cells: Sequence[Cell]) -> list[dict[str, str]]:
    """The cells as plain data (``--json``)."""
    return [{"estimator": c.estimator, "path": c.path, "relation": c.relation, "status": c.status, "message": c.message} for c in cells]
