"""docs/demo.md's table is what ``make demo`` prints with its default settings."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("verl")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "demo" / "rllm_demo.py"
COLUMNS = ["reward first 5", "reward last 5", "adv mean", "adv std", "adv min", "adv max", "zero adv"]


def rows(table: str) -> dict[str, list[float]]:
    """``estimator -> the numbers of COLUMNS`` of a training table (its seconds column, if any, dropped)."""
    found = {}
    for line in table.splitlines():
        cells = line.split()
        if cells and re.fullmatch(r"[+-]?\d+\.\d+", cells[1] if len(cells) > 1 else ""):
            found[cells[0]] = [float(c.rstrip("%")) / (100 if c.endswith("%") else 1) for c in cells[1 : 1 + len(COLUMNS)]]
    return found


def documented_table() -> str:
    """docs/demo.md's one demo table (single-turn rows, then the multi-turn rows): one outcome, for any x86-64 CPU."""
    (table,) = re.findall(r"```\n(estimator .*?)```", (ROOT / "docs" / "demo.md").read_text(), re.S)
    return table


MULTI_TURN = "== TRL multi-turn"


def test_the_documented_demo_tables_are_what_the_default_demo_prints(tmp_path):
    single, multi = documented_table().split(MULTI_TURN, 1)
    documented = rows(single)
    documented_multi = rows(multi)
    assert list(documented) == ["grpo", "rloo", "median_baseline"]
    assert list(documented_multi) == ["gigpo", "grpo"]
    command = [sys.executable, str(DEMO), "--estimators", ",".join(documented), "--output-dir", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    printed_single, printed_rest = done.stdout.split(MULTI_TURN, 1)
    printed_multi = rows(printed_rest.split("== verl", 1)[0])
    for table, documented_rows, printed in (("", documented, rows(printed_single)), (" (multi-turn)", documented_multi, printed_multi)):
        assert list(printed) == list(documented_rows)
        for name, numbers in documented_rows.items():
            for column, claimed, actual in zip(COLUMNS, numbers, printed[name], strict=True):
                assert claimed == actual, f"docs/demo.md's demo table{table}, row {name}, {column}: {claimed} but make demo prints {actual}; update it"
