"""Run every benchmark and print its tables: ``python -m benchmarks.run [--quick] [--only core,verl] [--json F] [--store F] [--check] ...``.

Each benchmark runs in a fresh process (:func:`_run_fresh`; ``--same-process``: all in this one). A benchmark whose
framework is not installed (verl, TRL's adapter) reports "not available" instead of failing. ``--store FILE`` merges
the reports of this run into FILE (each with its machine, versions and date; reports not run stay as they were) and
regenerates the docs' generated regions from it (:data:`benchmarks.docs.PAGES`); ``make bench`` stores into
:data:`benchmarks.docs.RESULTS`. ``--check`` exits with status 1 when a target of this run is missed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import sys
import time
from collections.abc import Callable
from pathlib import Path

from . import bench_command, core_estimators, docs, multi_objective, running_baseline, startup, step_level, trl_advantage, verl_advantage
from .plot import save_plot
from .report import Report, Target
from .timing import describe_machine, machine_info

__all__ = ["BENCHMARKS", "main"]

BENCHMARKS: dict[str, Callable[[bool], Report]] = {
    "startup": startup.run,
    "core": core_estimators.run,
    "multi_objective": multi_objective.run,
    "trl": trl_advantage.run,
    "verl": verl_advantage.run,
    "step_level": step_level.run,
    "running_baseline": running_baseline.run,
    "bench": bench_command.run,  # rllm-plugins bench's engine on the multi-turn batch
}


def _run_one(name: str, quick: bool) -> Report:
    try:
        return BENCHMARKS[name](quick)
    except ImportError as error:
        report = Report(name)
        report.targets.append(Target.unavailable(f"{name} benchmark", f"not available ({error})", "runs"))
        return report


def _set_torch_threads(threads: int) -> None:
    """torch's intra-op threads (``threads <= 0``: torch's default)."""
    try:
        import torch
    except ImportError:
        return
    if threads > 0:
        torch.set_num_threads(threads)


def _run_fresh(name: str, quick: bool, threads: int) -> Report:
    """``name``'s report, run in a fresh process: no report's allocator, page or profiler state reaches another's timings.

    How many page faults a large fresh array costs depends on what the process allocated and freed before, and on this
    machine it changed once torch's profiler (the verl reports' peak memory) had run: in one process, a report's times
    would depend on the reports before it.
    """
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context, initializer=_set_torch_threads, initargs=(threads,)) as pool:
        return pool.submit(_run_one, name, quick).result()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run each: a smoke test, not a measurement")
    parser.add_argument("--only", default=",".join(BENCHMARKS), help=f"comma-separated subset of {', '.join(BENCHMARKS)}")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--store", type=Path, help="merge the reports into this results file and regenerate docs/benchmarks.md from it (not with --quick)")
    parser.add_argument("--check", action="store_true", help="exit with status 1 when a target is missed")
    parser.add_argument("--plot", type=Path, help="also save the log-log plot (PNG) here")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: on a shared machine, multi-threaded ops wait for descheduled threads; 0 keeps torch's default)",
    )
    parser.add_argument(
        "--same-process",
        action="store_true",
        help="run every report in this process instead of a fresh one each (faster to start; a report's times then depend on the reports before it)",
    )
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    if args.store and args.quick:
        parser.error("--quick runs are smoke tests: they are not stored (drop --store)")
    _set_torch_threads(args.torch_threads)  # for machine_info; each report sets its own process's
    machine = machine_info()
    print(f"Machine: {describe_machine(machine)}\n", flush=True)
    reports, stored = [], {}
    for name in names:
        start = time.perf_counter()
        report = _run_one(name, args.quick) if args.same_process else _run_fresh(name, args.quick, args.torch_threads)
        reports.append(report)
        stored[name] = {"machine": machine_info(), "seconds": round(time.perf_counter() - start), **report.as_dict()}
        print(report.markdown(), flush=True)
        print(f"({name}: {time.perf_counter() - start:.0f} s)\n", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "quick": args.quick, "reports": [r.as_dict() for r in reports]}, indent=1, ensure_ascii=False))
    if args.store:
        docs.store(stored, args.store)
        docs.write(args.store)
    if args.plot:
        save_plot(reports, args.plot)
    missed = [t for r in reports for t in r.targets if t.met is False]
    if args.check and missed:
        print("Missed targets:\n" + "\n".join(f"- {t.line()}" for t in missed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
