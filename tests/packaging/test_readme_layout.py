"""The README's layout section names every module of the core and the adapters, and nothing that is not there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def layout_lines() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Layout\n") :]
    return re.search(r"```\n(.*?)```", section, re.S).group(1).splitlines()


def core_entries_in_readme() -> set[str]:
    """``types.py``, ``estimators/``, ... named at the start of the indented lines under ``rllm_plugins/``."""
    names: set[str] = set()
    for line in layout_lines():
        if line.startswith("  "):
            for token in line.split():
                if not token.endswith((".py", "/")):
                    break
                names.add(token)
    return names


def core_entries_in_tree() -> set[str]:
    core = ROOT / "rllm_plugins"
    modules = {p.name for p in core.glob("*.py") if p.name != "__init__.py"}
    packages = {f"{p.name}/" for p in core.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    return modules | packages


def adapter_modules_in_readme(adapter: str) -> set[str]:
    """The module and folder names on the adapter's line: ``plugin, compute/ (outcome, steps)`` -> {plugin, compute, outcome, steps}."""
    (line,) = [line for line in layout_lines() if line.startswith(f"adapters/{adapter}/")]
    return set(re.findall(r"\w+", line.split("): ", 1)[1]))


def adapter_modules_in_tree(adapter: str) -> set[str]:
    root = ROOT / "adapters" / adapter
    modules = {p.stem for p in root.rglob("*.py") if p.name != "__init__.py"}
    return modules | {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}


def test_the_layout_names_every_core_module_and_no_other():
    assert core_entries_in_readme() == core_entries_in_tree()


def test_the_layout_names_every_adapter_module_and_no_other():
    for adapter in ("rllm_verl", "rllm_trl"):
        assert adapter_modules_in_readme(adapter) == adapter_modules_in_tree(adapter), adapter


def test_every_top_level_folder_in_the_layout_exists():
    for line in layout_lines():
        if not line.startswith(" "):
            for token in line.split():
                if not token.endswith("/"):
                    break
                assert (ROOT / token).is_dir(), token


def test_the_line_of_each_core_subpackage_names_each_of_its_modules():
    for package in ("steps", "discovery", "state", "testing"):
        (line,) = [line for line in layout_lines() if line.startswith(f"  {package}/")]
        words = set(re.findall(r"\w+", line.split(maxsplit=1)[1]))
        modules = {p.stem for p in (ROOT / "rllm_plugins" / package).glob("*.py") if p.name != "__init__.py"}
        assert modules <= words, f"{package}/: {sorted(modules - words)} not named in the README's layout"
