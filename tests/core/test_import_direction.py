"""Imports flow one way: the core never imports an adapter, verl or TRL, and its modules import each other without cycles.

Read from the source (every ``import`` statement, those inside functions included), so a lazy
import that would only run on some path is caught too.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"rllm_plugins": ROOT / "rllm_plugins", "rllm_verl": ROOT / "adapters" / "rllm_verl", "rllm_trl": ROOT / "adapters" / "rllm_trl"}
FRAMEWORKS = {"verl", "trl"}


def module_name(package: str, path: Path) -> str:
    parts = [package, *path.relative_to(PACKAGES[package]).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules_of(package: str) -> dict[str, Path]:
    return {module_name(package, path): path for path in sorted(PACKAGES[package].rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Absolute names of the modules ``path`` (module ``name``) imports; ``from a import b`` counts as ``a.b`` when that is a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            for alias in node.names:
                found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in known else target)
    return found


@functools.cache
def import_graph(package: str) -> dict[str, set[str]]:
    modules = modules_of(package)
    return {name: imports_of(name, path, set(modules)) for name, path in modules.items()}


def top_level(module: str) -> str:
    return module.split(".")[0]


def test_the_import_reader_sees_relative_lazy_and_absolute_imports():
    graph = import_graph("rllm_plugins")
    assert "rllm_plugins.discovery.manager" in graph["rllm_plugins.registry"]  # from .discovery import manager
    assert "rllm_plugins.spec" in graph["rllm_plugins.discovery.manager"]  # from ..spec import AdvEstimatorSpec
    assert "difflib" in graph["rllm_plugins.discovery.unresolved"]  # imported inside a function
    assert "rllm_plugins.registry" in import_graph("rllm_verl")["rllm_verl.compute.outcome"]  # from rllm_plugins.registry import ...


@pytest.mark.parametrize("module", sorted(import_graph("rllm_plugins")))
def test_the_core_imports_no_adapter_and_no_framework(module):
    forbidden = {m for m in import_graph("rllm_plugins")[module] if top_level(m) in FRAMEWORKS | {"rllm_verl", "rllm_trl"}}
    assert not forbidden, f"{module} imports {sorted(forbidden)}: the core must not know the adapters or the frameworks"


@pytest.mark.parametrize(("package", "other"), [("rllm_verl", "rllm_trl"), ("rllm_trl", "rllm_verl")])
def test_an_adapter_imports_neither_the_other_adapter_nor_its_framework(package, other):
    framework = {"rllm_verl": "trl", "rllm_trl": "verl"}[package]
    for module, imported in import_graph(package).items():
        wrong = {m for m in imported if top_level(m) in {other, framework}}
        assert not wrong, f"{module} imports {sorted(wrong)}"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle among the modules of ``graph`` (as a path that ends where it starts), or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node], path[len(path) :] = "open", [node]
        for nxt in sorted(graph[node] & graph.keys()):
            if nxt == node or nxt == top_level(node):  # a package's own __init__ runs first anyway
                continue
            if state.get(nxt) == "open":
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}}) == ["p.a", "p.b", "p.c", "p.a"]
    assert find_cycle({"p.a": {"p.b"}, "p.b": set()}) is None


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_modules_import_each_other_without_cycles(package):
    cycle = find_cycle(import_graph(package))
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


SHELLS = {"rllm_plugins.cli", "rllm_plugins.__main__"}


@pytest.mark.parametrize("module", sorted(set(import_graph("rllm_plugins")) - SHELLS - {"rllm_plugins"}))
def test_no_core_module_climbs_back_to_the_package_top(module):
    assert "rllm_plugins" not in import_graph("rllm_plugins")[module], f"{module} imports the package's top; import the module that defines the name"


def test_estimators_reach_the_registry_below_them_and_discovery_names_the_built_ins():
    graph = import_graph("rllm_plugins")
    assert "rllm_plugins.registry" in graph["rllm_plugins.estimators.composite"]
    assert not {m for m in graph["rllm_plugins.discovery.manager"] if m.startswith("rllm_plugins.estimators")}


def folder_of(module: str) -> str:
    """The room a module lives in at the package's first level: ``rllm_plugins.state.store`` -> ``rllm_plugins.state``."""
    return ".".join(module.split(".")[:2])


def folder_graph(package: str) -> dict[str, set[str]]:
    """The import graph with each first-level folder collapsed into one node (a module at the top stays itself)."""
    folders: dict[str, set[str]] = {}
    for module, imported in import_graph(package).items():
        if module == package:
            continue
        here = folder_of(module)
        folders.setdefault(here, set()).update(folder_of(m) for m in imported if top_level(m) == package and m != package and folder_of(m) != here)
    return folders


def test_the_folder_graph_collapses_a_folder_into_one_node():
    assert folder_of("rllm_plugins.state.store") == "rllm_plugins.state" and folder_of("rllm_plugins.spec") == "rllm_plugins.spec"
    assert "rllm_plugins.state" in folder_graph("rllm_plugins")["rllm_plugins.config"]


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_folders_import_each_other_without_cycles(package):
    cycle = find_cycle(folder_graph(package))
    assert cycle is None, f"folder-level import cycle: {' -> '.join(cycle)}"


def test_verl_compute_never_reaches_the_patches_or_the_tools():
    graph = import_graph("rllm_verl")
    for module, imported in graph.items():
        if module.startswith("rllm_verl.compute"):
            wrong = {m for m in imported if m.startswith(("rllm_verl.patches", "rllm_verl.tools", "rllm_verl.conformance", "rllm_verl.plugin"))}
            assert not wrong, f"{module} imports {sorted(wrong)}: compute/ reads the current call from rllm_verl.context, never from a patch"
