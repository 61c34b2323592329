"""The README's table of tested versions is the version matrix's last run, and that run covers the ranges pyproject declares.

The matrix (``noxfile.py``, ``make compat``) writes ``compat/last_run.json``; ``compat/table.py`` renders the table.
Checked here: the table is that rendering; every cell of the matrix ran and passed; the tested verl and TRL releases
lie in the extras' ranges and include the oldest and the newest minor release of each range; the core ran on numpy 1
and 2 and on the oldest and the newest Python of ``requires-python``; the rLLM user's install line in the README and
docs/verl.md is the one the verl 0.8.0 cell installs.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
RUNS = json.loads((ROOT / "compat" / "last_run.json").read_text())
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _table_module():
    spec = importlib.util.spec_from_file_location("compat_table", ROOT / "compat" / "table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cells() -> dict[str, tuple]:
    """``CELLS`` of noxfile.py, read without importing nox (a literal dict of names to tuples)."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    (node,) = [n for n in tree.body if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", None) == "CELLS"]
    return {ast.literal_eval(k): v for k, v in zip(node.value.keys, node.value.values, strict=True)}


def _constant(name: str):
    """The literal value of noxfile.py's top-level ``NAME = [...]``."""
    body = ast.parse((ROOT / "noxfile.py").read_text()).body
    (node,) = [n for n in body if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)]
    return ast.literal_eval(node.value)


def _extra_range(extra: str, name: str) -> SpecifierSet:
    (requirement,) = [r for r in map(Requirement, PYPROJECT["project"]["optional-dependencies"][extra]) if r.name == name]
    return requirement.specifier


def _tested(name: str) -> list[Version]:
    return sorted(Version(run["versions"][name]) for cell, run in RUNS.items() if cell.startswith(f"{name}-"))


def _minors_in(specifier: SpecifierSet) -> tuple[tuple[int, int], tuple[int, int]]:
    """The oldest and the newest MAJOR.MINOR a ``>=A.B[.C],<X.Y`` range allows."""
    lower = next(Version(s.version) for s in specifier if s.operator == ">=")
    upper = next(Version(s.version) for s in specifier if s.operator == "<")
    newest = (upper.major, upper.minor - 1) if upper.minor else (upper.major - 1, 99)
    return (lower.major, lower.minor), newest


def test_the_readme_table_is_the_rendering_of_the_last_run():
    table = _table_module()
    readme = (ROOT / "README.md").read_text()
    assert table.replace_table(readme, table.render(RUNS)) == readme, "README.md's table is stale: run python compat/table.py"


def test_every_cell_of_the_matrix_ran_and_passed():
    assert set(RUNS) == set(_cells())
    assert {cell: run["result"] for cell, run in RUNS.items() if run["result"] != "passed"} == {}


@pytest.mark.parametrize("extra, name", [("verl", "verl"), ("trl", "trl")])
def test_the_tested_releases_lie_in_the_declared_range_and_span_it(extra, name):
    specifier = _extra_range(extra, name)
    tested = _tested(name)
    assert tested and all(specifier.contains(v) for v in tested), f"{name}: tested {tested} against {specifier}"
    oldest, newest = _minors_in(specifier)
    assert (tested[0].major, tested[0].minor) == oldest, f"{name} {specifier}: its oldest minor {oldest} has no cell"
    if newest[1] != 99:
        assert (tested[-1].major, tested[-1].minor) == newest, f"{name} {specifier}: its newest minor {newest} has no cell"


def test_the_core_ran_on_numpy_1_and_2_and_on_the_oldest_and_newest_python():
    core = {cell: run for cell, run in RUNS.items() if cell.startswith("core-")}
    numpy_majors = {Version(run["versions"]["numpy"]).major for run in core.values()}
    assert numpy_majors == {1, 2}
    numpy_floor = next(Version(s.version) for s in Requirement(next(d for d in PYPROJECT["project"]["dependencies"] if d.startswith("numpy"))).specifier)
    assert min(Version(run["versions"]["numpy"]) for run in core.values()) >= numpy_floor
    pythons = {Version(run["python"]).minor for run in core.values()}
    requires = SpecifierSet(PYPROJECT["project"]["requires-python"])
    allowed = [minor for minor in range(0, 20) if requires.contains(f"3.{minor}")]
    assert {min(allowed), max(allowed)} <= pythons, f"requires-python {requires}: tested 3.{sorted(pythons)}"


RLLM_LINES = [("verl-0.8.0", "OLD_VERL_PINS", "transformers<5"), ("verl-0.8.0-transformers5", "RLLM_MAIN_PINS", "transformers>=5.5.3")]


@pytest.mark.parametrize(("cell", "pins", "transformers"), RLLM_LINES)
def test_the_rllm_users_install_lines_are_the_ones_the_verl_080_cells_install(cell, pins, transformers):
    requirements = [ast.literal_eval(e) for e in _cells()[cell].elts[1].elts if isinstance(e, ast.Constant)]
    wanted = [p for p in requirements if p not in ("-e", ".[verl]")] + _constant(pins)
    for page in ("README.md", "docs/verl.md"):
        text = (ROOT / page).read_text()
        lines = [line for line in text.splitlines() if "verl==0.8.0" in line and f'"{transformers}"' in line]
        assert lines, f"{page} has no install line for verl 0.8.0 with {transformers}"
        quoted = set(re.findall(r'"([^"]+)"|\b(verl==[\d.]+)', lines[0]))
        found = {a or b for a, b in quoted}
        assert set(wanted) == found - {"./rllm-plugins[verl]"}, f"{page}: {lines[0]!r} is not the cell's {sorted(wanted)}"


def test_docs_compat_names_every_cell_and_the_ci_cells_are_the_ends_of_each_range():
    page = (ROOT / "docs" / "compat.md").read_text()
    named = set(re.findall(r"`((?:verl|trl|core|next-verl|ms-swift|axolotl)-[\w.-]+)`", page))
    assert named == set(_cells())
    ci = set(_constant("CI_CELLS"))
    for framework in ("verl", "trl"):
        versions = sorted((Version(c.split("-")[1]), c) for c in _cells() if c.startswith(f"{framework}-"))  # verl-0.8.0-transformers5: 0.8.0
        assert {versions[0][1], versions[-1][1]} == {c for c in ci if c.startswith(f"{framework}-")}
    assert {c for c in ci if c.startswith("core-")} == {"core-py3.10", "core-py3.12"}
