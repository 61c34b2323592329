"""No BLAS call on the advantage path: numpy's ``dot``/``matmul``/``@`` go through OpenBLAS, whose threads stall for
milliseconds on a loaded machine (a 440K-value dot took 16 ms threaded against 0.26 ms on one thread); the estimators
and adapters take ``einsum`` or column-wise sums instead. Found by reading the code's syntax trees."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (ROOT / "rllm_plugins", ROOT / "adapters" / "rllm_verl", ROOT / "adapters" / "rllm_trl")
BLAS_FUNCTIONS = {"dot", "matmul", "inner", "vdot", "tensordot"}


def blas_calls(source: str) -> list[int]:
    """Line numbers of ``a @ b`` and of ``np.dot(...)``-style calls (or ``x.dot(...)``) in ``source``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        matmul = isinstance(node, ast.BinOp | ast.AugAssign) and isinstance(node.op, ast.MatMult)
        call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in BLAS_FUNCTIONS
        if matmul or call:
            lines.append(node.lineno)
    return sorted(lines)


def test_the_finder_sees_each_form():
    assert blas_calls("a @ b\nnp.dot(a, b)\nx.dot(y)\nnp.matmul(a, b)\na @= b\nnp.einsum('i,i->', a, b)\n") == [1, 2, 3, 4, 5]


def test_no_module_of_the_package_or_the_adapters_calls_blas():
    found = {}
    for package in PACKAGES:
        for path in sorted(package.rglob("*.py")):
            lines = blas_calls(path.read_text())
            if lines:
                found[str(path.relative_to(ROOT))] = lines
    assert found == {}
