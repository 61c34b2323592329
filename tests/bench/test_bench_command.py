"""``rllm-plugins bench`` run as a user runs it: a subprocess on a tiny batch, its JSON report, its correctness gate and its refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

SCRIPT = Path(sys.executable).parent / "rllm-plugins"
TINY = ["--rows", "16", "--tokens", "40", "--group-size", "4", "--turns", "3", "--repeats", "2", "--budget", "0.02", "--min-runs", "1"]
ROW_FIELDS = {"path", "estimator", "reference", "options", "gate", "message", "time_s", "runs", "passes", "peak_bytes", "retained_bytes", "vs_first"}

WRONG_PLUGIN = '''
"""An estimator whose list form (the collector's) is right and whose batched form (the adapters') centres on the batch's mean."""
import numpy as np

from rllm_plugins import register_rllm_adv_estimator


def batch_centred(values, offsets, **_):
    return np.asarray(values, dtype=np.float64) - np.mean(values)


@register_rllm_adv_estimator("bench_wrong", batched=batch_centred, description="r - group mean, wrongly batched")
def group_centred(rewards, **_):
    out = [np.asarray(r, dtype=np.float64) - np.mean(r) for r in rewards]
    return out, out
'''


def bench(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RLLM_PLUGINS")}
    return subprocess.run([str(SCRIPT), "bench", *args], capture_output=True, text=True, env={**clean, **(env or {})}, timeout=timeout, check=False)


def report(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def test_built_ins_and_verls_own_estimators_pass_the_gate_and_are_timed(tmp_path: Path) -> None:
    pytest.importorskip("verl")
    out = tmp_path / "bench.json"
    done = bench(*TINY, "--estimators", "grpo,gigpo,median_baseline", "--options", 'gigpo={"gamma": 0.9}', "--own", "grpo_vectorized", "--json", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = report(out)
    assert data["ok"] is True and data["device"] == "cpu" and data["dtype"] == "float32"
    assert data["shape"] == {"rows": 16, "tokens": 40, "group_size": 4, "turns": 3} and data["steps"] == 48
    assert {"cpu", "cores", "python", "numpy", "torch", "verl", "date"} <= set(data["machine"])
    rows = {(row["path"], row["estimator"]): row for row in data["rows"]}
    assert list(rows) == [("verl", "grpo"), ("verl", "gigpo"), ("verl", "median_baseline"), ("verl", "verl:grpo_vectorized")]
    for row in rows.values():
        assert set(row) == ROW_FIELDS
        assert row["gate"] == "passed" and row["message"] == ""
        assert row["time_s"] > 0 and row["runs"] >= 2 and row["peak_bytes"] > 0
        assert row["passes"]["copies"] == 0  # all on the CPU
    assert rows["verl", "gigpo"]["options"] == {"gamma": 0.9}
    assert rows["verl", "verl:grpo_vectorized"]["reference"] == "verl_grpo"
    assert rows["verl", "grpo"]["vs_first"] == 1.0
    # an outcome estimator in verl reads the rewards and the mask once and writes its output in one pass (two blockwise writes)
    assert rows["verl", "grpo"]["passes"]["rewards read"] == 1.0 and rows["verl", "grpo"]["passes"]["output written"] == 2.0
    assert "| verl | verl:grpo_vectorized (= verl_grpo) | passed |" in done.stdout


def test_the_core_path_with_transforms_and_graded_rewards(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = bench(
        *TINY, "--paths", "core", "--estimators", "rloo,turn_grpo,composite", "--rewards", "graded",
        "--transform", "whiten", "--transform", 'clip={"min": -1, "max": 1}', "--no-memory", "--json", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = report(out)
    assert data["transforms"] == [["whiten", {}], ["clip", {"min": -1, "max": 1}]] and data["rewards"] == "graded"
    assert [(r["estimator"], r["gate"]) for r in data["rows"]] == [("rloo", "passed"), ("turn_grpo", "passed"), ("composite", "passed")]
    assert data["rows"][2]["options"] == {"terms": [["grpo", 0.5], ["gigpo", 0.5]]}  # what composite needs when no options are given
    assert all(r["passes"] is None and r["peak_bytes"] is None for r in data["rows"])  # the core path has no (B, T) tensors


@pytest.mark.parametrize("paths", ["core", "verl"])
def test_a_wrong_plugin_fails_the_gate_naming_it_and_the_first_differing_position(tmp_path: Path, paths: str) -> None:
    if paths == "verl":
        pytest.importorskip("verl")
    (tmp_path / "bench_wrong_plugin.py").write_text(textwrap.dedent(WRONG_PLUGIN))
    out = tmp_path / "bench.json"
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    chosen = ["--import", "bench_wrong_plugin", "--paths", paths, "--estimators", "bench_wrong,grpo", "--own", "none"]
    done = bench(*TINY, *chosen, "--no-memory", "--json", str(out), env=env)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    failed = [line for line in done.stderr.splitlines() if "correctness gate failed" in line]
    assert len(failed) == 1, done.stderr
    where = " at row 0, token " if paths == "verl" else " at step 0 (row 0, turn 0): "  # every group's mean differs from the batch's
    assert f"estimator 'bench_wrong' on path '{paths}': differs from the collector (bench_wrong) at" in failed[0], failed[0]
    assert where in failed[0] and "positions differ" in failed[0], failed[0]
    rows = report(out)["rows"]
    assert report(out)["ok"] is False
    assert [(r["estimator"], r["gate"]) for r in rows] == [("bench_wrong", "FAILED"), ("grpo", "passed")]
    assert rows[0]["time_s"] is None and rows[1]["time_s"] > 0  # a row that fails is not timed; the others are


def first_difference(message: str) -> str:
    return message.split(" at ", 1)[1].split(": got", 1)[0]


def test_the_gate_names_the_first_differing_position() -> None:
    """The engine's gate on a row whose output is the collector's but for one token."""
    from rllm_plugins.bench.batch import Shape, collector_advantages, make_batch
    from rllm_plugins.bench.engine import Request, gate
    from rllm_plugins.bench.paths import BenchPath, Row

    batch = make_batch(Shape(8, 30, 4, 2))
    right = batch.on_tokens(collector_advantages(batch, "grpo", {}))
    wrong = right.copy()
    row, token = 5, int(np.flatnonzero(batch.step_of_token[5] >= 0)[-1])
    wrong[row, token] += 1.0
    path = BenchPath("tokens", "test", "", "tokens", lambda b, s: None)  # type: ignore[arg-type,return-value]
    request = Request("tokens", "grpo")
    assert gate(batch, path, request, "grpo", Row(lambda: None, lambda: right), (), "float32") == ""
    message = gate(batch, path, request, "grpo", Row(lambda: None, lambda: wrong), (), "float32")
    assert first_difference(message) == f"row 5, token {token} (turn 1)", message
    assert message.startswith("estimator 'grpo' on path 'tokens': differs from the collector (grpo)") and "1 of 240 positions differ" in message


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--estimators", "grpo,no_such_estimator"], "no_such_estimator"),
        (["--rows", "10", "--group-size", "4"], "bad shape: rows (10) must be a multiple of the group size (4)"),
        (["--tokens", "5", "--turns", "3"], "bad shape: 3 turns need at least"),
        (["--rows", "0"], "bad shape: rows must be at least 1, got 0"),
        (["--options", "gigpo={not json", "--estimators", "gigpo"], "--options gigpo must be a JSON object"),
        (["--transform", "no_such_transform"], "no_such_transform"),
        (["--paths", "nowhere"], "--paths: no path 'nowhere'"),
    ],
)
def test_a_request_it_cannot_run_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    done = bench(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("rllm-plugins bench:")]
    assert len(lines) == 1 and says in lines[0], done.stderr
    assert done.stdout == ""


def test_device_cuda_without_cuda_is_refused() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("torch sees a CUDA device here")
    done = bench("--device", "cuda")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == "rllm-plugins bench: --device cuda: torch sees no CUDA device (torch.cuda.is_available() is False)"


def test_the_batch_is_laid_out_as_the_conformance_matrix_lays_it_out_for_verl() -> None:
    """The bench's (B, T) arrays are those of rllm_verl's conformance encoding of the same trajectories (padding after the row)."""
    pytest.importorskip("verl")
    from rllm_verl.conformance.legacy import encode

    from rllm_plugins.bench.batch import Shape, make_batch

    batch = make_batch(Shape(12, 50, 4, 3), rewards="graded")
    data, firsts = encode(batch.sample, values=True)
    width = data.batch["responses"].shape[1]
    assert width <= 50 and not batch.response_mask[:, width:].any()
    for key, mine in (("responses", batch.responses), ("response_mask", batch.response_mask), ("token_level_rewards", batch.token_level_rewards)):
        assert np.array_equal(data.batch[key].numpy(), mine[:, :width]), key
    assert np.array_equal(data.batch["values"].numpy(), batch.values[:, :width].astype(np.float32))
    steps = batch.step_of_token[:, :width].reshape(-1)
    assert firsts == [int(np.flatnonzero(steps == s)[0]) for s in range(batch.num_steps)]  # each turn's first model token
