"""Running baselines: ``rae``'s vectorised scan vs prime-rl's per-trajectory loop, a call's cost vs the state's size, checkpoints.

prime-rl's ``RAEAlgorithm.score_group`` walks the traces one at a time: read the agent's baseline,
write ``r - b``, update ``b``. ``rae``'s batched form computes the same numbers with the closed form of
the scan (cumulative sums of ``r_j decay^-j`` in chunks), for one key (``key_by="role"``) or one key
per task (``key_by="task"``, up to 1,000 tasks). Outputs are checked against the loop before timing. The loop
checks nothing; a call that refuses a bad task id must first look at every id once, so ``key_by="task"`` is held
to the loop plus that one pass (``checked_loop_rae``), its floor at a few hundred trajectories.

Then the state's size: one collector call (64 task groups of 8, ``key_by="task"``) with the
``AlgorithmConfig`` already holding 64 … 1,048,576 tasks' baselines, the call's tasks among them; a
call must cost what its batch costs. Last, saving (``to_json`` + write) and loading (read +
``load_state_dict``) the state of 1,048,576 tasks: time and bytes.

Run: ``python -m benchmarks.running_baseline [--quick]``.
"""

from __future__ import annotations

import json
import os
import tempfile
import time

import numpy as np

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.estimators.rae import STATE_SCHEMA, rae
from rllm_plugins.state.store import EstimatorState

from .report import Report, Target, script_main
from .timing import Table, format_bytes, format_ratio, format_time, measure, measure_interleaved

__all__ = ["checked_loop_rae", "loop_rae", "run"]

TARGET_VS_LOOP = 3.0  # key_by="role", at 1M trajectories
TARGET_TASK_VS_LOOP = 1.0  # key_by="task", at every batch size, vs the loop + the task-id check every call must make
TARGET_STATE_SIZE = 1.5  # a call with 1M tasks in state vs the same call with 64
DECAY = 0.95
TASKS = 1_000
GROUPS, GROUP_SIZE = 64, 8
BATCH_SIZES = (512, 4_096, 32_768, 262_144, 1_048_576)  # trajectories per call, vs the loop (a full run)
STATE_SIZES = (64, 4_096, 65_536, 1_048_576)  # tasks held (a full run)
CHECKPOINT_TASKS = 1_048_576


def loop_rae(values: list[float], keys: list[str], baselines: dict[str, float], decay: float = DECAY) -> list[float]:
    """prime-rl's loop: each trace against its key's baseline, then the update (``baselines`` updated in place)."""
    out = []
    for reward, key in zip(values, keys, strict=True):
        baseline = baselines.get(key, 0.0)
        out.append(reward - baseline)
        baselines[key] = decay * baseline + (1.0 - decay) * reward
    return out


def checked_loop_rae(values: list[float], keys: list[str], baselines: dict[str, float], decay: float = DECAY) -> list[float]:
    """The floor of a call that checks its input: the loop, after the one pass over the task ids that rae needs to refuse
    a bad one (each distinct id a non-empty str; prime-rl's loop checks nothing)."""
    if not all(type(key) is str and key for key in dict.fromkeys(keys)):
        raise ValueError("task ids must be non-empty str")
    return loop_rae(values, keys, baselines, decay)


def _vs_loop(report: Report, quick: bool, rng: np.random.Generator) -> dict[str, list[float]]:
    """The first table: rae vs the loop per key_by and size; returns the speed-ups per key_by."""
    sizes = [512, 4_096] if quick else list(BATCH_SIZES)
    rounds, budget = (1, 0.0) if quick else (3, 0.6)
    table = Table(
        "Running baseline (rae, decay 0.95): vectorised scan vs a per-trajectory Python loop",
        ["key_by", "trajectories", "loop", "loop + id check", "rae", "speed-up", "vs loop + id check"],
    )
    ratios: dict[str, list[float]] = {"role": [], "task": []}
    floor_ratios: list[float] = []  # key_by="task": vs the loop + the id check
    for key_by in ("role", "task"):
        for n in sizes:
            values = rng.integers(-4, 5, n) / 4.0
            offsets = np.arange(n + 1, dtype=np.int64)  # groups of one
            task_ids = np.array([f"t{i}" for i in rng.integers(0, TASKS, n)], dtype=object)
            keys = ["role"] * n if key_by == "role" else task_ids.tolist()
            expected = loop_rae(values.tolist(), keys, {})
            got, _ = rae(values, offsets, state={}, key_by=key_by, task_ids=task_ids)
            if not np.allclose(got, expected, rtol=0, atol=1e-9):
                raise AssertionError(f"rae (key_by={key_by!r}, n={n}) differs from the loop")
            times = measure_interleaved(
                {
                    "loop": lambda v=values, k=keys: loop_rae(v.tolist(), k, {}),
                    "checked": lambda v=values, k=keys: checked_loop_rae(v.tolist(), k, {}),
                    "rae": lambda v=values, o=offsets, t=task_ids, kb=key_by: rae(v, o, state={}, key_by=kb, task_ids=t),
                },
                rounds=rounds,
                budget_s=budget,
            )
            ratio = times["loop"] / times["rae"]
            ratios[key_by].append(ratio)
            floor_ratio = times["checked"] / times["rae"]
            if key_by == "task":
                floor_ratios.append(floor_ratio)
            cells = [format_time(times["loop"]), format_time(times["checked"]), format_time(times["rae"]), format_ratio(ratio), format_ratio(floor_ratio)]
            table.rows.append([key_by, f"{n:,}", *cells])
            report.point("running baseline", f"rae ({key_by})", n, times["rae"])
            report.point("running baseline", f"loop ({key_by})", n, times["loop"])
    table.notes.append("Both start from empty baselines; the loop includes converting the rewards to a list (prime-rl's traces are Python objects).")
    table.notes.append(
        f"key_by='task' (up to {TASKS:,} tasks): rae finds each task's key with one C-level dict lookup per trajectory "
        "(dict.fromkeys, then map), then scans every key at once."
    )
    table.notes.append(
        "loop + id check: the loop after one pass over the task ids (each distinct id a non-empty str), the least a call that "
        "refuses a bad id must do; at a few hundred trajectories that pass, not the scan, is rae's cost over the loop."
    )
    report.tables.append(table)
    report.targets.append(
        Target.check(f"rae (key_by='role') vs the loop at {sizes[-1]:,} trajectories", ratios["role"][-1], TARGET_VS_LOOP, at_most=False, quick=quick)
    )
    worst = min(floor_ratios)
    report.targets.append(
        Target.check(
            "rae (key_by='task') vs the loop + the task-id check, every batch size",
            worst,
            TARGET_TASK_VS_LOOP,
            at_most=False,
            measured=f"{format_ratio(worst)} (slowest)",
            quick=quick,
        )
    )
    return ratios


def _batch(rng: np.random.Generator, tasks: np.ndarray) -> list[TrajectoryGroup]:
    """64 task groups of 8 trajectories, one per task of ``tasks``."""
    return [
        TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1])], reward=float(r)) for r in rng.integers(0, 2, GROUP_SIZE)], group_id=f"t{t}:solver")
        for t in tasks
    ]


def _collect(groups: list[TrajectoryGroup], config: AlgorithmConfig) -> None:
    """One collector call on ``groups`` (their advantages cleared first, as fresh trajectories have none)."""
    for g in groups:
        for t in g.trajectories:
            t.steps[0].advantage = None
    collect_reward_and_advantage_from_trajectory_groups(groups, config)


def _config_holding(tasks: int, rng: np.random.Generator) -> AlgorithmConfig:
    """A config whose rae state holds ``tasks`` task baselines (loaded, as on resume)."""
    config = AlgorithmConfig(estimator="rae", estimator_kwargs={"key_by": "task"})
    baselines = dict(zip((f"t{i}" for i in range(tasks)), (rng.integers(-8, 9, tasks) / 8.0).tolist(), strict=True))
    config.load_state_dict({"format": 2, "estimators": {"rae": {"solver": {"task_baselines": baselines}}}, "options": {}})
    return config


def _state_size(report: Report, quick: bool, rng: np.random.Generator) -> float:
    """The second table: one collector call vs the tasks held; returns the largest size's time over the smallest's."""
    sizes = [64, 4_096] if quick else list(STATE_SIZES)
    budget = 0.0 if quick else 1.0
    table = Table(
        f"A collector call ({GROUPS} task groups of {GROUP_SIZE}, rae key_by='task') vs the tasks its state holds",
        ["tasks in state", "call", "vs 64 tasks"],
    )
    first = None
    for size in sizes:
        config = _config_holding(size, rng)
        groups = _batch(rng, rng.choice(size, GROUPS, replace=size < GROUPS))
        _collect(groups, config)  # the first call after a load checks the loaded state against rae's schema, once
        seconds = measure(lambda c=config, g=groups: _collect(g, c), budget_s=budget, min_runs=1 if quick else 5).median_s
        first = first or seconds
        table.rows.append([f"{size:,}", format_time(seconds), format_ratio(seconds / first)])
        report.point("state size", "collector call (rae, key_by='task')", size, seconds)
    table.notes.append(
        "Each call reads and updates only its batch's 64 tasks; the kept state is updated in place at commit (nothing copied or re-checked whole)."
    )
    report.tables.append(table)
    growth = report.series["state size"]["collector call (rae, key_by='task')"][-1][1] / first
    report.targets.append(Target.check(f"a collector call with {sizes[-1]:,} tasks in state vs with 64", growth, TARGET_STATE_SIZE, quick=quick))
    return growth


def _checkpoint(report: Report, quick: bool, rng: np.random.Generator) -> None:
    """The third table: saving and loading the state of many tasks."""
    tasks = 4_096 if quick else CHECKPOINT_TASKS
    config = _config_holding(tasks, rng)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "rllm_estimator_state.json")
        start = time.perf_counter()
        with open(path, "w", encoding="utf-8") as f:
            f.write(config.estimator_state.to_json())
        saved = time.perf_counter() - start
        size = os.path.getsize(path)
        start = time.perf_counter()
        with open(path, encoding="utf-8") as f:
            EstimatorState().load_state_dict(json.load(f), schemas={"rae": STATE_SCHEMA})
        loaded = time.perf_counter() - start
    table = Table(f"Checkpoint of rae's state with {tasks:,} task baselines", ["save (to_json + write)", "load (read + load_state_dict, checked)", "file"])
    table.rows.append([format_time(saved), format_time(loaded), format_bytes(size)])
    table.notes.append("Once per checkpoint; loading checks every value as plain data and against rae's state schema (finite floats keyed by str).")
    report.tables.append(table)


def run(quick: bool = False) -> Report:
    """The three tables and their targets."""
    rng = np.random.default_rng(0)
    report = Report("running_baseline")
    _vs_loop(report, quick, rng)
    _state_size(report, quick, rng)
    _checkpoint(report, quick, rng)
    return report


if __name__ == "__main__":
    script_main(__doc__, run, "small sizes, one round (a smoke test)")
