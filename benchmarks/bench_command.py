"""``rllm-plugins bench`` on the multi-turn batch: ``rllm_grpo`` beside every step-level estimator and verl's own, each checked first.

The rows of :func:`rllm_plugins.bench.engine.run_bench` (the command's engine) on 2,048 rows x 1,024 tokens in groups of 8,
4 turns per row: the outcome estimator a user switches from (``grpo``, the first row, so "vs the path's first" is what
switching costs), the step-level built-ins, and verl's own ``grpo_vectorized`` and ``rloo_vectorized``; on verl's path
where verl is installed, else the core's. The target is the correctness gate: every row equals the collector's advantages.

Run: ``python -m benchmarks.bench_command [--quick]`` (the same as ``rllm-plugins bench`` with these arguments).
"""

from __future__ import annotations

from rllm_plugins.bench.batch import Shape
from rllm_plugins.bench.engine import BenchConfig, Request, run_bench, table
from rllm_plugins.bench.paths import available_paths

from .report import Report, Target, script_main

__all__ = ["ESTIMATORS", "QUICK_SHAPE", "SHAPE", "run"]

ESTIMATORS = ("grpo", "gigpo", "turn_grpo", "step_reinforce")
SHAPE, QUICK_SHAPE = Shape(2048, 1024, 8, 4), Shape(64, 128, 8, 4)


def run(quick: bool = False) -> Report:
    shape = QUICK_SHAPE if quick else SHAPE
    found = available_paths()
    path = found["verl"] if not isinstance(found.get("verl", "missing"), str) else found["core"]
    requests = [Request(path.name, name, {"gamma": 0.95} if name != "grpo" else {}) for name in ESTIMATORS]
    requests += [Request(path.name, name, {}, own=True) for name in path.own_default]
    config = BenchConfig(
        shape, tuple(requests), {path.name: path}, repeats=1 if quick else 5, budget_s=0.0 if quick else 3.0, min_runs=1 if quick else 3, memory=not quick
    )
    result = run_bench(config)
    report = Report("bench")
    report.tables.append(table(result))
    failed = [row["message"] for row in result["rows"] if row["gate"] != "passed"]
    report.targets.append(
        Target.check(
            f"rllm-plugins bench rows that differ from the collector at {shape.label()}",
            len(failed),
            0,
            measured=f"{len(failed)} of {len(result['rows'])}",
            goal="0",
        )
    )
    return report


def main() -> None:
    script_main(__doc__, run, "a small batch, one run each (smoke test)")


if __name__ == "__main__":
    main()
