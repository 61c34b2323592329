"""`make demo` end to end at a minimal size: trains with two estimators and on the multi-turn environment, writes the plot, prints the tables."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("verl")
pytest.importorskip("matplotlib")

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo" / "rllm_demo.py"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    output_dir = tmp_path_factory.mktemp("demo_output")
    command = [sys.executable, str(DEMO), "--steps", "2", "--estimators", "grpo,median_baseline", "--multi-turn-steps", "2", "--output-dir", str(output_dir)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, check=False)
    assert run.returncode == 0, f"demo failed ({run.returncode}):\n{run.stdout}\n{run.stderr[-4000:]}"
    return run, output_dir


def test_help_explains_every_option() -> None:
    run = subprocess.run([sys.executable, str(DEMO), "--help"], capture_output=True, text=True, timeout=60, check=True)
    for option in ("--steps", "--estimators", "--multi-turn-steps", "--output-dir", "--seed"):
        assert option in run.stdout


def test_prints_one_training_row_per_estimator(demo_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    run, _ = demo_run
    lines = run.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("estimator") and "zero adv" in line)
    rows = [line.split()[0] for line in lines[header + 2 : header + 4]]
    assert rows == ["grpo", "median_baseline"]


def test_prints_one_multi_turn_row_each_for_gigpo_and_grpo(demo_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    run, _ = demo_run
    lines = run.stdout.splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("== TRL multi-turn"))
    assert lines[title + 1].startswith("estimator") and "zero adv" in lines[title + 1]
    rows = [line.split() for line in lines[title + 3 : title + 5]]
    assert [row[0] for row in rows] == ["gigpo", "grpo"]
    for row in rows:
        assert 0.0 <= float(row[1]) <= 1.0 and 0.0 <= float(row[2]) <= 1.0  # mean share of right turns


def test_saves_the_reward_curve_png(demo_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    _, output_dir = demo_run
    png = output_dir / "reward_curves.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_prints_verl_compute_advantage_side_by_side(demo_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    run, _ = demo_run
    header = next(line for line in run.stdout.splitlines() if line.startswith("prompt"))
    assert header.split()[4:] == ["rllm_grpo", "grpo", "rllm_rloo", "rloo", "rloo_vectorized"]
    assert "0+3=" in run.stdout  # the group of one response


def test_writes_the_summary_with_each_table_under_the_title_it_is_printed_with(demo_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    run, output_dir = demo_run
    summary = (output_dir / "summary.txt").read_text()
    assert "median_baseline" in summary
    assert "rloo_vectorized" in summary
    titles = [line for line in summary.splitlines() if line.startswith("== ")]
    assert [t.split(":")[0] for t in titles] == ["== TRL", "== TRL multi-turn", "== verl"]
    assert titles == [line for line in run.stdout.splitlines() if line.startswith("== ")]
    for title in titles:  # the table under each title is the printed one
        printed = run.stdout.split(f"{title}\n", 1)[1].split("\n\n", 1)[0].split("\nreward curves: ", 1)[0]
        assert f"{title}\n{printed}" in summary, title


def test_unknown_estimator_fails_before_training(tmp_path: Path) -> None:
    command = [sys.executable, str(DEMO), "--steps", "1", "--estimators", "grpo,no_such_estimator", "--output-dir", str(tmp_path)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode != 0
    assert "no_such_estimator" in run.stderr
    assert not (tmp_path / "reward_curves.png").exists()


def test_piped_output_has_no_progress_bars_and_one_line_per_run(demo_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    run, _ = demo_run
    assert "%|" not in run.stderr + run.stdout  # tqdm's bars
    trained = [line.split(":")[0] for line in run.stdout.splitlines() if line.startswith("trained with ")]
    assert trained == ["trained with grpo", "trained with median_baseline", "trained with gigpo (multi-turn)", "trained with grpo (multi-turn)"]
