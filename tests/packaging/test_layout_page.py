"""docs/layout.md names every module of the core and the adapters, and nothing that is not there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def layout_lines() -> list[str]:
    text = (ROOT / "docs" / "layout.md").read_text()
    return re.search(r"```\n(.*?)```", text, re.S).group(1).splitlines()


def indented_under(top: str) -> list[str]:
    """The indented lines that follow the top-level line starting with ``top`` (up to the next top-level line)."""
    lines, inside = [], False
    for line in layout_lines():
        if not line.startswith(" "):
            inside = line.startswith(top)
        elif inside:
            lines.append(line)
    return lines


def leading_entries(lines: list[str]) -> set[str]:
    """``types.py``, ``estimators/``, ... named at the start of ``lines``."""
    names: set[str] = set()
    for line in lines:
        for token in line.split():
            if not token.endswith((".py", "/")):
                break
            names.add(token)
    return names


def entries_in_tree(folder: Path) -> set[str]:
    modules = {p.name for p in folder.glob("*.py") if p.name != "__init__.py"}
    packages = {f"{p.name}/" for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    return modules | packages


def stems(folder: Path) -> set[str]:
    return {p.stem for p in folder.glob("*.py") if p.name != "__init__.py"}


def test_the_layout_names_every_core_module_and_no_other():
    assert leading_entries(indented_under("rllm_plugins/")) == entries_in_tree(ROOT / "rllm_plugins")


def test_the_line_of_each_adapter_names_each_of_its_modules_and_subpackages_and_no_other():
    for adapter in ("rllm_verl", "rllm_trl"):
        (line,) = [line for line in layout_lines() if line.startswith(f"adapters/{adapter}/")]
        named = {name.strip() for name in line.split("): ", 1)[1].split(",")}
        in_tree = {name.removesuffix(".py") for name in entries_in_tree(ROOT / "adapters" / adapter)}
        assert named == in_tree, adapter
        assert leading_entries(indented_under(f"adapters/{adapter}/")) == {n for n in in_tree if n.endswith("/")}, adapter


def test_every_top_level_folder_in_the_layout_exists():
    for line in layout_lines():
        if not line.startswith(" "):
            for token in line.split():
                if not token.endswith("/"):
                    break
                assert (ROOT / token).is_dir(), token


def test_the_line_of_each_subpackage_names_each_of_its_modules():
    packages = [("rllm_plugins/", name) for name in ("steps", "discovery", "state", "testing", "estimators")]
    packages += [("adapters/rllm_verl/", name) for name in ("compute", "patches", "tools", "conformance")]
    for top, package in packages:
        (line,) = [line for line in indented_under(top) if line.startswith(f"  {package}/")]
        words = set(re.findall(r"\w+", line.split(maxsplit=1)[1]))
        modules = stems(ROOT / top / package)
        if package == "estimators":  # one file per estimator: the line names the plugin module and composite
            modules = {"builtin", "composite"}
        assert modules <= words, f"{top}{package}: {sorted(modules - words)} not named in docs/layout.md"
    matrix = next(line for line in indented_under("rllm_plugins/") if line.startswith("  testing/"))
    assert stems(ROOT / "rllm_plugins" / "testing" / "matrix") <= set(re.findall(r"\w+", matrix.split("matrix/", 1)[1]))
