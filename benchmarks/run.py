"""Run every benchmark and print its tables: ``python -m benchmarks.run [--quick] [--only core,verl] [--json F] [--plot F]``.

A benchmark whose framework is not installed (verl, TRL's adapter) reports "not available"
instead of failing.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

from . import core_estimators, multi_objective, running_baseline, startup, step_level, trl_advantage, verl_advantage
from .plot import save_plot
from .report import Report, Target
from .timing import machine_description

__all__ = ["BENCHMARKS", "main"]

BENCHMARKS: dict[str, Callable[[bool], Report]] = {
    "startup": startup.run,  # first: fresh processes, before this one grows
    "core": core_estimators.run,
    "multi_objective": multi_objective.run,
    "trl": trl_advantage.run,
    "verl": verl_advantage.run,
    "step_level": step_level.run,
    "running_baseline": running_baseline.run,
}


def _run_one(name: str, quick: bool) -> Report:
    try:
        return BENCHMARKS[name](quick)
    except ImportError as error:
        report = Report(name)
        report.targets.append(Target.unavailable(f"{name} benchmark", f"not available ({error})", "runs"))
        return report


def _set_torch_threads(threads: int) -> None:
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(threads)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run each: a smoke test, not a measurement")
    parser.add_argument("--only", default=",".join(BENCHMARKS), help=f"comma-separated subset of {', '.join(BENCHMARKS)}")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--plot", type=Path, help="also save the log-log plot (PNG) here")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: on a shared machine, multi-threaded ops wait for descheduled threads; 0 keeps torch's default)",
    )
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    if args.torch_threads > 0:
        _set_torch_threads(args.torch_threads)
    machine = machine_description()
    print(f"Machine: {machine}\n", flush=True)
    reports = []
    for name in names:
        start = time.perf_counter()
        report = _run_one(name, args.quick)
        reports.append(report)
        print(report.markdown(), flush=True)
        print(f"({name}: {time.perf_counter() - start:.0f} s)\n", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "quick": args.quick, "reports": [r.as_dict() for r in reports]}, indent=1, ensure_ascii=False))
    if args.plot:
        save_plot(reports, args.plot)


if __name__ == "__main__":
    main()
