"""Every benchmark runs end to end in ``--quick`` mode (a smoke test: nothing here is timed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_benchmarks_run_quick_and_write_json_and_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "results.json"
    plot = tmp_path / "plot.png"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--quick", "--json", str(out), "--plot", str(plot)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    results = json.loads(out.read_text())
    assert [r["name"] for r in results["reports"]] == ["startup", "core", "multi_objective", "trl", "verl", "step_level", "running_baseline", "bench"]
    assert all(r["targets"] for r in results["reports"])
    assert "| estimator |" in result.stdout
    assert plot.stat().st_size > 0
