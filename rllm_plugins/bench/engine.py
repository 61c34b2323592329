"""``rllm-plugins bench``: estimators timed on one batch, each first checked against the collector.

For each path (:mod:`.paths`) and each estimator asked for (registered ones by name, with options; the framework's own
where the path runs them), in order:

1. **the gate**: one call from a fresh state; its advantages must equal the collector's on the same trajectories
   (:func:`~rllm_plugins.bench.batch.collector_advantages`, with the same options and transforms; the framework's own
   estimator against the registered estimator that reproduces it), to the dtype's tolerance, on every output position
   (at the token level: every token, 0 off the model tokens). A row that differs, or raises, fails: the message names
   the estimator, the path and the first differing position, and the row is not timed;
2. **the time**: the smallest of ``repeats`` medians (:func:`~rllm_plugins.bench.timing.min_of_medians`), the rows
   that passed taken in turn within each repeat; on a CUDA device each call is timed until the device is done;
3. **passes** over ``(B, T)`` and host<->device copies, counted on one call (:func:`~rllm_plugins.bench.measure.count_passes`),
   and the **peak memory** of one call (:func:`~rllm_plugins.bench.measure.peak_extra_memory`).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .batch import BenchBatch, Shape, collector_advantages, make_batch
from .measure import count_passes, peak_extra_memory
from .paths import BenchPath, Row, Setting
from .timing import Table, format_bytes, format_ratio, format_time, machine_info, min_of_medians

__all__ = ["RTOL", "BenchConfig", "BenchResult", "Request", "gate", "run_bench"]

RTOL = {"float64": 1e-9, "float32": 2e-5, "bfloat16": 2e-2, "float16": 2e-3}  # of the largest |advantage| too (atol)


@dataclass(frozen=True)
class Request:
    """One row asked for: ``name`` (a registered estimator, or the framework's own when ``own``) on ``path``."""

    path: str
    name: str
    options: Mapping[str, Any] = field(default_factory=dict)
    own: bool = False


@dataclass(frozen=True)
class BenchConfig:
    shape: Shape
    requests: tuple[Request, ...]
    paths: Mapping[str, BenchPath]
    transforms: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    dtype: str = "float32"
    device: str = "cpu"
    rewards: str = "binary"
    seed: int = 0
    repeats: int = 5
    budget_s: float = 1.0
    min_runs: int = 3
    memory: bool = True


@dataclass
class BenchResult:
    """One row of the report."""

    path: str
    estimator: str
    reference: str
    options: dict[str, Any]
    gate: str  # "passed" or "FAILED"
    message: str = ""
    time_s: float | None = None
    runs: int = 0
    passes: dict[str, Any] | None = None
    peak_bytes: int | None = None
    retained_bytes: int | None = None
    vs_first: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _tolerance(dtype: str, path: BenchPath, own: bool) -> float:
    rtol = RTOL.get(path.precision or dtype, 1e-9)
    return max(rtol, RTOL.get(path.own_precision, 0.0)) if own and path.own_precision else rtol


def gate(batch: BenchBatch, path: BenchPath, request: Request, reference: str, row: Row, transforms: Sequence[Any], dtype: str) -> str:
    """``""`` when the row's output equals the collector's, else the message naming the estimator and the first differing position."""
    who = f"{path.framework}'s own estimator {request.name!r}" if request.own else f"estimator {request.name!r}"
    who += f" on path {path.name!r}"
    want = collector_advantages(batch, reference, request.options, transforms)
    if path.layout == "tokens":
        want = batch.on_tokens(want)
    try:
        got = np.asarray(row.output(), dtype=np.float64)
    except Exception as error:  # any failure of the path is the row's finding
        return f"{who}: raised {type(error).__name__}: {error}"
    if got.shape != want.shape:
        return f"{who}: gave advantages of shape {got.shape}, the collector {want.shape}"
    finite = np.abs(want[np.isfinite(want)])
    rtol = _tolerance(dtype, path, request.own)
    bad = ~np.isclose(got, want, rtol=rtol, atol=rtol * max(float(finite.max()) if finite.size else 0.0, 1e-300))
    if not bad.any():
        return ""
    flat = int(np.flatnonzero(bad.reshape(-1))[0])
    first = batch.position(flat, path.layout)
    return (
        f"{who}: differs from the collector ({reference}) at {first}: got {float(got.reshape(-1)[flat])!r}, "
        f"expected {float(want.reshape(-1)[flat])!r} ({int(bad.sum())} of {bad.size} positions differ, rtol {rtol:g})"
    )


def run_bench(config: BenchConfig) -> dict[str, Any]:
    """The report of one run (see the module docstring): ``{"machine", "shape", ..., "rows": [...], "ok"}``."""
    batch = make_batch(config.shape, config.rewards, config.seed)
    setting = Setting(config.dtype, config.device)
    prepared = {name: path.prepare(batch, setting) for name, path in config.paths.items() if any(r.path == name for r in config.requests)}
    results: list[BenchResult] = []
    timed: dict[int, Row] = {}
    for request in config.requests:
        path = config.paths[request.path]
        reference = path.own[request.name] if request.own else request.name
        label = path.own_label(request.name) if request.own else request.name
        result = BenchResult(path.name, label, reference, dict(request.options), "passed")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*at most one turn", category=UserWarning)
            row = prepared[request.path].row(request.name, request.options, config.transforms, request.own)
            message = gate(batch, path, request, reference, row, config.transforms, config.dtype)
        if message:
            result.gate, result.message = "FAILED", message
        else:
            timed[len(results)] = row
        results.append(result)
    syncs = [p.sync for p in prepared.values() if p.sync is not None]
    sync = syncs[0] if syncs else None
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*at most one turn", category=UserWarning)
        times = min_of_medians({str(i): row.call for i, row in timed.items()}, config.repeats, config.budget_s, config.min_runs, sync) if timed else {}
        for i, row in timed.items():
            result = results[i]
            result.time_s, result.runs = times[str(i)].median_s, times[str(i)].runs
            if row.tensors is not None:
                result.passes = count_passes(row.call, config.shape.rows * config.shape.tokens, row.tensors)
        if config.memory:  # after every timing: torch's profiler changes how fresh memory faults afterwards
            for i, row in timed.items():
                results[i].peak_bytes, results[i].retained_bytes = peak_extra_memory(row.call, config.device)
    firsts: dict[str, float] = {}
    for result in results:
        if result.time_s is not None:
            first = firsts.setdefault(result.path, result.time_s)
            result.vs_first = result.time_s / first
    return {
        "machine": machine_info() | _device_info(config.device),
        "shape": asdict(config.shape),
        "steps": batch.num_steps,
        "dtype": config.dtype,
        "device": config.device,
        "rewards": config.rewards,
        "seed": config.seed,
        "transforms": [[n, dict(o)] for n, o in config.transforms],
        "repeats": config.repeats,
        "budget_s": config.budget_s,
        "rows": [r.as_dict() for r in results],
        "ok": all(r.gate == "passed" for r in results),
    }


def _device_info(device: str) -> dict[str, Any]:
    if not device.startswith("cuda"):
        return {}
    import torch

    with contextlib.suppress(Exception):
        return {"gpu": torch.cuda.get_device_name(device), "cuda": torch.version.cuda}
    return {}


def _passes_cell(passes: Mapping[str, Any] | None) -> str:
    """``rewards 1r, mask 1.02r, output 1r 2w``: torch's passes over each (B, T) tensor it touched (``numpy only``: none)."""
    if passes is None:
        return "—"
    cells = []
    for name in dict.fromkeys(k.rpartition(" ")[0] for k in passes if k.endswith((" read", " written"))):
        read, written = passes.get(f"{name} read", 0), passes.get(f"{name} written", 0)
        if read or written:
            cells.append(f"{name}" + (f" {read:.3g}r" if read else "") + (f" {written:.3g}w" if written else ""))
    return ", ".join(cells) or "none by torch (numpy only)"


def _copies_cell(passes: Mapping[str, Any] | None) -> str:
    if passes is None:
        return "—"
    return f"{passes['copies']} ({format_bytes(passes['copied bytes'])})" if passes["copies"] else "0"


def table(report: Mapping[str, Any]) -> Table:
    """The report as a :class:`~rllm_plugins.bench.timing.Table` (Markdown)."""
    shape = Shape(**report["shape"])
    title = f"{shape.label()}, {report['steps']:,} turns in all, {report['dtype']} rewards on {report['device']}"
    columns = ("path", "estimator", "gate", "time", "vs the path's first", "passes over (B,T)", "host<->device copies", "peak memory")
    out = Table(title, columns)
    for row in report["rows"]:
        time = format_time(row["time_s"]) if row["time_s"] is not None else "—"
        ratio = format_ratio(row["vs_first"]) if row["vs_first"] is not None else "—"
        estimator = row["estimator"] + (f" (= {row['reference']})" if row["reference"] != row["estimator"] else "")
        options = ", ".join(f"{k}={v!r}" for k, v in row["options"].items())
        estimator += f" [{options}]" if options else ""
        memory = format_bytes(row["peak_bytes"]) if row["peak_bytes"] is not None else "—"
        out.add(row["path"], estimator, row["gate"], time, ratio, _passes_cell(row["passes"]), _copies_cell(row["passes"]), memory)
    out.notes.append(
        f"gate: each row's advantages against the collector's on the same trajectories, before it is timed; time: the smallest of "
        f"{report['repeats']} medians; passes over (B,T): torch's reads and writes of the token rewards, the mask and the output "
        "(numpy's work not counted); peak memory: beyond what existed before the call."
    )
    if report["transforms"]:
        out.notes.append("advantage transforms after every estimator: " + ", ".join(f"{n} {o}" if o else n for n, o in report["transforms"]))
    return out


def failures(report: Mapping[str, Any]) -> list[str]:
    return [row["message"] for row in report["rows"] if row["gate"] != "passed"]
