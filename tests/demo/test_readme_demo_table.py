"""The README's demo table is what ``make demo`` prints with its default settings."""

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
TOLERANCE = 0.02  # rounding of the last printed digit, and float noise of a CPU like the one the README names


def rows(table: str) -> dict[str, list[float]]:
    """``estimator -> the numbers of COLUMNS`` of a training table (its seconds column, if any, dropped)."""
    found = {}
    for line in table.splitlines():
        cells = line.split()
        if cells and re.fullmatch(r"[+-]?\d+\.\d+", cells[1] if len(cells) > 1 else ""):
            found[cells[0]] = [float(c.rstrip("%")) / (100 if c.endswith("%") else 1) for c in cells[1 : 1 + len(COLUMNS)]]
    return found


def readme_tables() -> tuple[str, dict[str, list[float]]]:
    """The README's demo tables, and the rows measured on another CPU (``estimator -> numbers``), which may replace theirs."""
    section = (ROOT / "README.md").read_text().split("## The demo\n", 1)[1].split("\n## ", 1)[0]
    main, *others = re.findall(r"```\n(estimator .*?)```", section, re.S)
    return main, {name: numbers for other in others for name, numbers in rows(other).items()}


MULTI_TURN = "== TRL multi-turn"


def test_the_readme_demo_tables_are_what_the_default_demo_prints(tmp_path):
    main_table, on_another_cpu = readme_tables()
    single, multi = main_table.split(MULTI_TURN, 1)
    documented = rows(single)
    documented_multi = rows(multi)
    assert set(on_another_cpu) <= set(documented), "rows measured on another CPU replace rows of the main table"
    assert list(documented) == ["grpo", "rloo", "median_baseline"]
    assert list(documented_multi) == ["gigpo", "grpo"]
    command = [sys.executable, str(DEMO), "--estimators", ",".join(documented), "--output-dir", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    printed_single, printed_rest = done.stdout.split(MULTI_TURN, 1)
    for table, readme_rows, printed in (("", documented, rows(printed_single)), (" (multi-turn)", documented_multi, rows(printed_rest.split("== verl", 1)[0]))):
        assert list(printed) == list(readme_rows)
        for name, numbers in readme_rows.items():
            candidates = [numbers] + ([on_another_cpu[name]] if table == "" and name in on_another_cpu else [])
            if any(all(abs(r - a) <= TOLERANCE for r, a in zip(c, printed[name], strict=True)) for c in candidates):
                continue
            for column, readme, actual in zip(COLUMNS, numbers, printed[name], strict=True):
                assert abs(readme - actual) <= TOLERANCE, f"README's demo table{table}, row {name}, {column}: {readme} but make demo prints {actual}; update it"
