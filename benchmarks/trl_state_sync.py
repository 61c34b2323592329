"""TRL with two processes: what keeping ``rae``'s state costs per training step, with 64 vs 200,000 tasks held.

TRL's mixin computes the advantages of the gathered batch on every process, so every process keeps
the same state without sending it: per step the only exchange is the batch's task ids
(``accelerate.utils.gather_object``, as the mixin does), then each process runs ``compute_advantages``
on the gathered batch. This runs two real processes (``torchrun``, gloo on CPU), each holding the state
of ``tasks`` tasks (loaded, as on resume), and times per step: the gather of the task ids and the
advantage computation with the state (64 prompts x 8 generations, ``key_by="task"``); at the end the
two processes' states are compared (they must be equal, byte for byte, as JSON).

Run: ``python -m benchmarks.trl_state_sync [--quick]``.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .report import Report, Target, script_main
from .timing import Table, format_ratio, format_time

__all__ = ["run"]

PROMPTS, GENERATIONS = 64, 8
TARGET = 1.5  # a step with 200k tasks held vs with 64
TITLE = f"TRL, two processes (torchrun, gloo): keeping rae's state (key_by='task') per step of {PROMPTS} prompts x {GENERATIONS}"
COLUMNS = ("tasks held", "gather task ids", "advantages with the state", "step vs 64 tasks", "state (JSON)", "ranks' states equal")


def _worker(out: str, sizes: list[int], steps: int) -> None:
    """One rank: ``steps`` steps, each once per state size (interleaved, so load hits both alike); writes ``<out>/rank<k>.json``."""
    import numpy as np
    import torch
    from accelerate import PartialState
    from accelerate.utils import gather_object
    from rllm_trl.outcome import compute_advantages, prepare_batch

    from rllm_plugins.state.store import EstimatorState

    torch.distributed.init_process_group("gloo")
    PartialState(cpu=True)  # accelerate on the process group, as in the trainer (gather_object reads it)
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    rng = np.random.default_rng(0)  # the same on every rank: the same states
    states = {}
    for tasks in sizes:
        held = {f"prompt {i}": float(v) for i, v in enumerate(rng.integers(-8, 9, tasks) / 8.0)}
        states[tasks] = EstimatorState()
        states[tasks].load_state_dict(
            {"format": 2, "estimators": {"rae": {"default": {"task_baselines": held}}}, "options": {"rae": {"decay": 0.95, "key_by": "task"}}}
        )
    local = PROMPTS // world
    times: dict[int, dict[str, list[float]]] = {tasks: {"gather": [], "compute": []} for tasks in sizes}
    for step in range(steps):
        for tasks in sizes:
            step_rng = np.random.default_rng(1_000 + step)
            prompts = [f"prompt {i}" for i in step_rng.choice(tasks, PROMPTS, replace=tasks < PROMPTS)]
            mine = [p for p in prompts[rank * local : (rank + 1) * local] for _ in range(GENERATIONS)]
            rewards = torch.tensor(step_rng.integers(0, 2, PROMPTS * GENERATIONS), dtype=torch.float32).reshape(-1, 1)
            torch.distributed.barrier()
            start = time.perf_counter()
            task_ids = gather_object(mine)
            times[tasks]["gather"].append(time.perf_counter() - start)
            start = time.perf_counter()
            batch = prepare_batch(rewards, torch.ones(1), GENERATIONS, task_ids=task_ids)
            compute_advantages(batch, "rae", estimator_kwargs={"key_by": "task"}, state=states[tasks])
            times[tasks]["compute"].append(time.perf_counter() - start)
    digests = {tasks: states[tasks].to_json() for tasks in sizes}
    summary = {str(t): {**times[t], "state_bytes": len(d), "state": hashlib.sha256(d.encode()).hexdigest()} for t, d in digests.items()}
    Path(out, f"rank{rank}.json").write_text(json.dumps(summary))
    torch.distributed.barrier()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(sizes: list[int], steps: int) -> list[dict[str, dict[str, object]]]:
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={_free_port()}"]
        command += ["-m", "benchmarks.trl_state_sync", "--worker", out, ",".join(map(str, sizes)), str(steps)]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
        done = subprocess.run(command, capture_output=True, text=True, timeout=1200, env=env, cwd=Path(__file__).resolve().parents[1], check=False)
        if done.returncode != 0:
            raise RuntimeError(f"torchrun failed: {done.stderr[-3000:]}")
        return [json.loads(Path(out, f"rank{k}.json").read_text()) for k in (0, 1)]


def run(quick: bool = False) -> Report:
    """Both state sizes in one two-process run, interleaved step by step; the median step of the slower rank."""
    steps = 3 if quick else 100
    sizes = [64, 2_000] if quick else [64, 200_000]
    report = Report("trl_state_sync")
    table = Table(TITLE, list(COLUMNS))
    ranks = _torchrun(sizes, steps)
    first = None
    for tasks in sizes:
        of = [r[str(tasks)] for r in ranks]
        gather = max(statistics.median(r["gather"][1:]) for r in of)
        compute = max(statistics.median(r["compute"][1:]) for r in of)
        total = gather + compute
        first = first or total
        equal = of[0]["state"] == of[1]["state"]
        if not equal:
            raise AssertionError(f"the two processes' states differ with {tasks} tasks held")
        table.rows.append(
            [f"{tasks:,}", format_time(gather), format_time(compute), format_ratio(total / first), f"{of[0]['state_bytes'] / 2**20:.3g} MiB", "yes"]
        )
    table.notes.append("Medians over the steps after the first, the slower rank; the two sizes alternate step by step. No state crosses processes.")
    report.tables.append(table)
    growth = total / first
    report.targets.append(Target.check(f"a TRL step with {sizes[-1]:,} tasks held vs 64, two processes", growth, TARGET, quick=quick))
    return report


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        # Leave without tearing down, also after an error: torch's gloo group joins its worker thread while holding
        # the GIL, and that thread may still need the GIL to free a finished all-gather's tensors (a hang, or an abort).
        try:
            _worker(sys.argv[2], [int(n) for n in sys.argv[3].split(",")], int(sys.argv[4]))
        except BaseException:
            sys.excepthook(*sys.exc_info())  # torch's hook: each line prefixed with its rank
            os._exit(1)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(0)
    else:
        script_main(__doc__, run, "small sizes, three steps (a smoke test)")
