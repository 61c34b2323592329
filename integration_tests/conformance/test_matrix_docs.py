"""docs/conformance.md states the matrix as the program builds it: its size, tables, declared exceptions, snippet."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytest.importorskip("trl")

from rllm_plugins.registry import available_estimators, get_estimator
from rllm_plugins.testing.matrix import RELATIONS, estimator_table, path_table

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "conformance.md").read_text()


def table_after(heading: str) -> list[list[str]]:
    """The first markdown table after ``heading``: its rows (header and rule left out), the first cell without its backticks."""
    section = PAGE[PAGE.index(f"## {heading}\n") :]
    lines = [line for line in section.split("\n|---", 1)[1].splitlines()[1:]]
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        first, *rest = (cell.strip() for cell in line.strip("|").split(" | "))
        rows.append([first.strip("`"), *rest])
    return rows


@pytest.fixture(scope="module")
def paths():
    return path_table()


def test_the_page_states_the_matrix_size_the_tables_give(paths):
    page = (ROOT / "docs" / "conformance.md").read_text().replace("\n", " ")
    found = re.search(r"(\d+) estimators \N{MULTIPLICATION SIGN} (\d+) paths and wrappers \N{MULTIPLICATION SIGN} (\d+) relations = ([\d,]+) cells", page)
    assert found, "docs/conformance.md states the matrix size"
    estimators, path_count, relations, cells = (int(g.replace(",", "")) for g in found.groups())
    assert (estimators, path_count, relations) == (len(estimator_table()), len(paths), len(RELATIONS))
    assert cells == estimators * path_count * relations


def test_the_path_table_is_the_programs(paths):
    assert table_after("The path table") == [[p.name, p.kind, p.framework, p.description] for p in paths]


def test_the_relation_table_is_the_programs():
    assert table_after("The relations") == [[r.name, r.description] for r in RELATIONS]


def test_every_declared_exception_is_listed_and_no_other():
    specs = {get_estimator(name).spec for name in available_estimators()}
    declared = sorted([spec.name, f"`{relation}`", reason] for spec in specs for relation, reason in spec.breaks.items())
    assert sorted(table_after("Declared exceptions")) == declared
    assert declared, "the built-ins declare at least one exception"


def test_the_python_snippet_runs_and_finds_no_failing_cell(capsys):
    (snippet,) = re.findall(r"```python\n(.*?)```", PAGE, re.S)
    exec(compile(snippet, "docs/conformance.md", "exec"), {})
    statuses = ast.literal_eval(capsys.readouterr().out)  # the snippet prints a list literal
    assert "PASS" in statuses and "FAIL" not in statuses
