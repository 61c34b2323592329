"""Measurement and reporting shared by ``rllm-plugins bench`` and the benchmark scripts (``benchmarks/``).

Timings are medians of repeated runs after one warm-up run; a pair of implementations is
always measured in the same process on the same inputs, so their ratio is meaningful even
on a busy machine. :func:`min_of_medians` repeats such medians and keeps the smallest (the
run least disturbed by the rest of the machine).
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.metadata
import math
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Measurement",
    "Table",
    "describe_machine",
    "format_bytes",
    "format_ratio",
    "format_time",
    "machine_description",
    "machine_info",
    "measure",
    "measure_interleaved",
    "min_of_medians",
    "page_faults_per_call",
]


@dataclass(frozen=True)
class Measurement:
    """Median wall time in seconds over ``runs`` timed calls (after one warm-up call)."""

    median_s: float
    runs: int

    def as_dict(self) -> dict[str, Any]:
        return {"median_s": self.median_s, "runs": self.runs}


def measure(fn: Callable[[], object], budget_s: float = 0.5, min_runs: int = 3, max_runs: int = 200) -> Measurement:
    """Time ``fn()``: one warm-up call, then enough calls to fill ``budget_s`` (within ``min_runs`` .. ``max_runs``).

    A call that alone takes longer than ``budget_s`` is timed once more only, and the warm-up
    counts as a run: its start-up effects are negligible at that scale.
    """
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    if first >= budget_s:
        samples = [first]
        runs = 1
    else:
        samples = []
        runs = max(min_runs, min(max_runs, math.ceil(budget_s / max(first, 1e-9))))
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    samples.sort()
    mid = len(samples) // 2
    median = samples[mid] if len(samples) % 2 else (samples[mid - 1] + samples[mid]) / 2
    return Measurement(median, len(samples))


def measure_interleaved(fns: dict[str, Callable[[], object]], rounds: int = 3, budget_s: float = 0.5, min_runs: int = 3) -> dict[str, float]:
    """Median seconds of each of ``fns``, measured in ``rounds`` alternating rounds (median of the round medians).

    Alternating keeps a burst of load on a shared machine from landing on one implementation only.
    """
    medians: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            medians[name].append(measure(fn, budget_s / rounds, min_runs).median_s)
    return {name: sorted(values)[len(values) // 2] for name, values in medians.items()}


def min_of_medians(
    fns: dict[str, Callable[[], object]], repeats: int = 5, budget_s: float = 0.5, min_runs: int = 3, sync: Callable[[], None] | None = None
) -> dict[str, Measurement]:
    """The smallest of ``repeats`` medians of each of ``fns`` (each median over runs filling ``budget_s / repeats``), the
    functions taken in turn within each repeat so that a burst of load on a shared machine reaches them all alike.

    ``sync`` (a device's synchronisation) runs after every call, inside the time: a call is timed until its work is done.
    The result's ``runs`` counts every timed call of the function.
    """
    medians: dict[str, list[float]] = {name: [] for name in fns}
    runs = dict.fromkeys(fns, 0)
    for _ in range(max(1, repeats)):
        for name, fn in fns.items():
            timed = fn if sync is None else _synced(fn, sync)
            m = measure(timed, budget_s / max(1, repeats), min_runs)
            medians[name].append(m.median_s)
            runs[name] += m.runs
    return {name: Measurement(min(values), runs[name]) for name, values in medians.items()}


def _synced(fn: Callable[[], object], sync: Callable[[], None]) -> Callable[[], object]:
    def call() -> object:
        out = fn()
        sync()
        return out

    return call


def page_faults_per_call(fn: Callable[[], object], runs: int = 3) -> float:
    """Minor page faults per call of ``fn()`` (after one untimed call): how much of its memory came fresh from the kernel.

    A call that writes fresh memory pays a fault per page it first touches (4 KiB, or 2 MiB where the kernel gives huge
    pages); whether an allocation is fresh depends on the process's allocator history, so the tables show it beside the time.
    """
    try:
        import resource
    except ImportError:  # not on Unix
        return math.nan
    fn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(runs):
        fn()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / runs


def format_time(seconds: float | None) -> str:
    """A duration with a unit that keeps 3 significant digits (``—`` when missing)."""
    if seconds is None or math.isnan(seconds):
        return "—"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_ratio(ratio: float | None) -> str:
    if ratio is None or math.isnan(ratio):
        return "—"
    return f"{ratio:.3g}x"


def format_bytes(n: float | None) -> str:
    if n is None:
        return "—"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


@dataclass
class Table:
    """A titled table of rows, printed as Markdown and kept as data for the plot and JSON."""

    title: str
    columns: Sequence[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, *cells: object) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"table {self.title!r} has {len(self.columns)} columns, got a row of {len(cells)}")
        self.rows.append([str(c) for c in cells])

    def markdown(self) -> str:
        lines = [f"### {self.title}", "", "| " + " | ".join(self.columns) + " |", "|" + "|".join("---" for _ in self.columns) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        if self.notes:
            lines += [""] + [f"- {note}" for note in self.notes]
        return "\n".join(lines) + "\n"


def machine_info() -> dict[str, Any]:
    """The machine and the versions a measurement depends on: CPU model, cores, Python, numpy, torch (and its threads),
    verl and TRL where installed, the load average and the date (UTC)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import numpy

    info: dict[str, Any] = {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "numpy": numpy.__version__}
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    for package in ("verl", "trl"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            info[package] = importlib.metadata.version(package)
    if hasattr(os, "getloadavg"):
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    info["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return info


def describe_machine(info: dict[str, Any]) -> str:
    """:func:`machine_info` as one line."""
    parts = [info["cpu"], f"{info['cores']} logical cores", f"Python {info['python']}", f"numpy {info['numpy']}"]
    if "torch" in info:
        parts.append(f"torch {info['torch']} ({info['torch_threads']} threads)")
    parts += [f"{package} {info[package]}" for package in ("verl", "trl") if package in info]
    if "load_average" in info:
        parts.append("load average {:.2f} {:.2f} {:.2f}".format(*info["load_average"]))
    parts.append(info["date"])
    return ", ".join(parts)


def machine_description() -> str:
    """CPU model, core count, Python and library versions, the load average and the date when measured."""
    return describe_machine(machine_info())
