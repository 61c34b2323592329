"""Every module and file the README and docs/ name exists: ``rllm_plugins.steps.turns``, ``adapters/rllm_verl/patches/v1.py``."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*/README.md"))]
DOTTED = re.compile(r"(?<![\w./-])((?:rllm_plugins|rllm_verl|rllm_trl)(?:\.\w+)+)")
ENTRY_POINT_GROUPS = {"rllm_plugins.commands", "rllm_plugins.conformance_paths"}  # dotted, but a group name, not a module
PATH = re.compile(r"(?<![\w./-])((?:rllm_plugins|adapters|benchmarks|examples|tests|integration_tests|docs)/[\w./-]*\w)")


def resolves(dotted: str) -> bool:
    """``dotted`` is a module, or an attribute reached from the longest importable prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


def test_the_reader_finds_references():
    assert DOTTED.findall("see `rllm_plugins.steps.turns` and rllm_verl.patches.v1.") == ["rllm_plugins.steps.turns", "rllm_verl.patches.v1"]
    found = PATH.findall("in `adapters/rllm_verl/patches/v1.py`, run benchmarks/step_level.py")
    assert found == ["adapters/rllm_verl/patches/v1.py", "benchmarks/step_level.py"]
    assert not resolves("rllm_plugins.turns") and resolves("rllm_plugins.steps.StepBatch")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_named_module_and_file_exists(page):
    text = page.read_text()
    missing = sorted({d for d in DOTTED.findall(text) if d not in ENTRY_POINT_GROUPS and not resolves(d.rstrip("."))})
    assert not missing, f"{page.name} names modules or attributes that do not exist: {missing}"
    base = page.parent if page.parent != ROOT / "docs" else ROOT
    files = sorted({p for p in PATH.findall(text) if not (ROOT / p).exists() and not (base / p).exists()})
    assert not files, f"{page.name} names paths that do not exist: {files}"
