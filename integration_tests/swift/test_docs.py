"""docs/swift.md: every Python snippet runs and prints what the page says (those that import rllm_swift only where
ms-swift is installed); its table of environment variables is the plugin file's; docs/layout.md and docs/architecture.md
name every module of rllm_swift."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "swift.md"
TEXT = PAGE.read_text()
PACKAGE = ROOT / "adapters" / "rllm_swift"


def snippets() -> list[tuple[str, str | None]]:
    """Each ``python`` block with the block of ``prints`` that follows it (None when none does)."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"```python\n(.*?)```\n(?:\nprints\n\n```\n(.*?)```)?", TEXT, re.S)]


def test_the_page_has_its_snippets():
    assert len(snippets()) == 2 and all(printed is not None for _, printed in snippets())


@pytest.mark.parametrize("index", range(2))
def test_every_snippet_runs_and_prints_what_the_page_says(index):
    code, printed = snippets()[index]
    if "rllm_swift" in code and importlib.util.find_spec("swift") is None:
        pytest.skip("needs ms-swift")
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"{PAGE}:snippet{index}", "exec"), {"__name__": f"swift_doc_{index}"})
    finally:
        if "rllm_swift" in code:
            importlib.import_module("rllm_swift").uninstall()
    assert out.getvalue() == printed


def test_the_environment_table_is_the_plugin_file_s():
    source = (PACKAGE / "plugin.py").read_text()
    table = re.findall(r"^\| `(RLLM_SWIFT_\w+)` \|", TEXT, re.M)
    named = re.search(r"ENVIRONMENT = \((.*?)\)", source).group(1)
    assert table == [*re.findall(r'"(\w+)"', named), "RLLM_SWIFT_DISABLE"]
    assert 'OPT_OUT = "RLLM_SWIFT_DISABLE"' in (PACKAGE / "seam.py").read_text()


def test_the_supported_range_is_the_one_versions_declares():
    assert 'SUPPORTED = (">=4.6", "<4.7")' in (PACKAGE / "versions.py").read_text()
    assert "`ms-swift>=4.6,<4.7`" in TEXT and '"ms-swift>=4.6,<4.7"' in TEXT


def modules() -> set[str]:
    return {p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}


def test_the_layout_names_each_module_of_rllm_swift():
    text = (ROOT / "docs" / "layout.md").read_text()
    (line,) = [line for line in text.splitlines() if line.startswith("adapters/rllm_swift/")]
    assert {name.strip() for name in line.split("): ", 1)[1].split(",")} == modules()


def test_the_architecture_names_each_module_of_rllm_swift():
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert {m for m in modules() if f"`rllm_swift/{m}.py`" not in text} == set()


def test_the_site_lists_the_page():
    assert "      - ms-swift: swift.md\n" in (ROOT / "mkdocs.yml").read_text()


def test_rllm_swift_imports_the_core_alone_never_rllm_trl_or_trl():
    imported = set()
    for path in PACKAGE.glob("*.py"):
        imported |= set(re.findall(r"^\s*(?:from|import)\s+([\w.]+)", path.read_text(), re.M))
    assert {name.split(".")[0] for name in imported} - {"", "__future__", "rllm_plugins", "rllm_swift", "swift", "torch", "numpy"} <= {
        "functools", "importlib", "inspect", "json", "logging", "os", "sys", "types", "warnings", "collections", "dataclasses", "typing", "pathlib",
    }, imported  # fmt: skip
