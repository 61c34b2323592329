"""``rllm_verl/patches/`` wrap verl and hold no computation: they import our code only at module top, never the core
(``rllm_plugins``: estimators, the run, transforms) nor an array library, and only the adapter's modules listed here.

Read with ``ast`` (no verl needed). A patch that needs a new computation calls a function of ``rllm_verl.compute``.
"""

from __future__ import annotations

import ast
from pathlib import Path

PATCHES = Path(__file__).resolve().parents[2] / "adapters" / "rllm_verl" / "patches"
ALLOWED = ("rllm_verl.compute.", "rllm_verl.context", "rllm_verl.extension", "rllm_verl.registration", "rllm_verl.versions")
ARRAYS = ("numpy", "torch")


def imports(tree: ast.Module) -> list[tuple[str, int, bool]]:
    """``(module, line, at the top)`` of every import in ``tree``."""
    top = {id(node) for node in tree.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, node.lineno, id(node) in top) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.module, node.lineno, id(node) in top))
    return out


def test_patches_import_the_adapters_modules_at_the_top_and_neither_the_core_nor_arrays():
    found = []
    files = sorted(PATCHES.glob("*.py"))
    assert len(files) >= 6, f"the patches folder moved: {PATCHES}"
    for path in files:
        for module, line, at_top in imports(ast.parse(path.read_text(), str(path))):
            where = f"{path.name}:{line}: {module}"
            if module.split(".")[0] in ARRAYS:
                found.append(f"{where} (an array library: computation belongs in rllm_verl.compute)")
            elif module.split(".")[0] == "rllm_plugins":
                found.append(f"{where} (the core: reach it through rllm_verl.compute)")
            elif module.startswith("rllm_verl"):
                if not module.startswith(ALLOWED):
                    found.append(f"{where} (not one of {ALLOWED})")
                elif not at_top:
                    found.append(f"{where} (inside a function: import it at the module's top)")
    assert not found, "\n".join(found)


def test_the_rule_finds_what_it_forbids():
    tree = ast.parse("import numpy\nfrom rllm_verl.compute.outcome import f\ndef g():\n    from rllm_verl.compute.steps import h\n    import torch\n")
    found = [(m, top) for m, _, top in imports(tree)]
    assert found == [("numpy", True), ("rllm_verl.compute.outcome", True), ("rllm_verl.compute.steps", False), ("torch", False)]
