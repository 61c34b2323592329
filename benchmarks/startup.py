"""Start-up: ``import rllm_plugins`` + plugin discovery vs ``import numpy``, in fresh processes.

Each measurement is a new interpreter that times its own imports with ``time.perf_counter``
(interpreter start-up, the same for every row, is left out). Discovery is the first
``available_estimators()`` call: it scans the environment's entry points of the group
``rllm_plugins`` and imports each plugin. The "+ 20 plugins" rows install 20 tiny plugin
distributions (built here as wheels) with ``pip install --no-deps --target`` into a temporary
directory put on ``PYTHONPATH``.

Run: ``python -m benchmarks.startup [--quick]``.
"""

from __future__ import annotations

import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

from .report import Report, Target, script_main
from .timing import Table, format_ratio, format_time

__all__ = ["build_plugin_wheel", "run"]

TARGET_RATIO = 1.5  # vs the floor: import numpy and pluggy and scan the entry points, no module of ours

PROBES = {
    "numpy": "import numpy",
    "importlib.metadata + pluggy": "import importlib.metadata, pluggy",
    # what any pluggy host with entry-point plugins pays before its own code: no rllm_plugins module
    "floor": "import numpy, importlib.metadata, pluggy\nimportlib.metadata.entry_points(group='rllm_plugins')",
    "rllm_plugins": "import rllm_plugins",
}

PLUGIN_MODULE = '''"""Benchmark plugin {i}."""

import numpy as np

from rllm_plugins import AdvEstimatorSpec, hookimpl


def centred_{i}(values: np.ndarray, offsets: np.ndarray, /, **kwargs: object) -> np.ndarray:
    """Reward minus the batch mean."""
    return values - values.mean()


@hookimpl
def rllm_adv_estimators():
    return [AdvEstimatorSpec("bench_centred_{i}", batched=centred_{i})]
'''


def build_plugin_wheel(directory: Path, i: int) -> Path:
    """Write the wheel of tiny plugin distribution ``rllm-bench-plugin-<i>`` (one estimator) into ``directory``."""
    name, version = f"rllm_bench_plugin_{i}", "1.0"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": PLUGIN_MODULE.format(i=i),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: rllm-bench-plugin-{i}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: rllm-plugins-benchmarks\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": f"[rllm_plugins]\nbench_{i} = {name}\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n"
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


def _install_plugins(count: int, root: Path) -> Path:
    wheels = [build_plugin_wheel(root, i) for i in range(count)]
    target = root / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--disable-pip-version-check"]
    subprocess.run([*pip, "--target", str(target), *map(str, wheels)], check=True)
    return target


def _probe(code: str, pythonpath: Path | None, discover: bool) -> dict[str, float]:
    """Run ``code`` (then discovery) in a fresh interpreter; its own timings in seconds."""
    script = (
        "import time, json\n"
        "t0 = time.perf_counter()\n"
        f"{code}\n"
        "t1 = time.perf_counter()\n"
        + ("import rllm_plugins; n = len(rllm_plugins.available_estimators())\n" if discover else "n = 0\n")
        + "t2 = time.perf_counter()\n"
        "print(json.dumps({'import': t1 - t0, 'discovery': t2 - t1, 'estimators': n}))\n"
    )
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _compile_bytecode() -> None:
    """Byte-compile ``rllm_plugins`` as pip does on a regular install: in an editable install with
    ``PYTHONDONTWRITEBYTECODE`` set, every fresh interpreter would otherwise compile its sources again."""
    import rllm_plugins

    compileall.compile_dir(str(Path(rllm_plugins.__file__).parent), quiet=1)


def run(quick: bool = False) -> Report:
    _compile_bytecode()
    runs = 1 if quick else 15
    plugin_count = 3 if quick else 20
    report = Report("startup")
    table = Table(
        f"Start-up: fresh interpreter, median of {runs} processes",
        ["what", "installed plugins", "import", "discovery", "total", "total / import numpy", "total / floor", "estimators found"],
    )
    table.notes.append("import numpy is the anchor; rllm_plugins imports numpy, pluggy and importlib.metadata (which pluggy imports too).")
    table.notes.append("floor: numpy, importlib.metadata and pluggy imported and the entry points scanned, without any rllm_plugins module.")
    table.notes.append("rllm_plugins is byte-compiled first, as a regular pip install leaves it (the plugins' wheels are compiled by pip).")
    table.notes.append("installed plugins counts the venv's own (examples/rllm-median-baseline when installed) plus the benchmark's.")
    with tempfile.TemporaryDirectory(prefix="rllm-bench-plugins-") as tmp:
        site = _install_plugins(plugin_count, Path(tmp))
        baseline = len(metadata.entry_points(group="rllm_plugins"))
        cases = [("import numpy", PROBES["numpy"], None, False, baseline)]
        cases.append(("import importlib.metadata, pluggy", PROBES["importlib.metadata + pluggy"], None, False, baseline))
        cases.append(("floor: import numpy, pluggy + entry-point scan", PROBES["floor"], None, False, baseline))
        for path, extra in ((None, 0), (site, plugin_count)):
            cases.append(("import rllm_plugins + discovery", PROBES["rllm_plugins"], path, True, baseline + extra))
        samples: dict[int, list[dict[str, float]]] = {i: [] for i in range(len(cases))}
        for _ in range(runs):  # interleaved, so that load changes hit every case alike
            for i, (_, code, path, discover, _) in enumerate(cases):
                samples[i].append(_probe(code, path, discover))
    totals = [statistics.median(s["import"] + s["discovery"] for s in samples[i]) for i in range(len(cases))]
    numpy_total, floor_total = totals[0], totals[2]
    for i, (label, _, _, discover, installed) in enumerate(cases):
        imp = statistics.median(s["import"] for s in samples[i])
        disc = statistics.median(s["discovery"] for s in samples[i])
        ratio = totals[i] / numpy_total
        cells = [format_time(totals[i]), format_ratio(ratio), format_ratio(totals[i] / floor_total)]
        if not discover:
            table.add(label, "—", format_time(imp), "—", *cells, "—")
            continue
        table.add(label, installed, format_time(imp), format_time(disc), *cells, int(samples[i][0]["estimators"]))
        name = f"import rllm_plugins + discovery, {installed} plugins, vs the floor (numpy + pluggy + entry-point scan)"
        report.targets.append(Target.check(name, totals[i] / floor_total, TARGET_RATIO, quick=quick))
    report.tables.append(table)
    return report


def main() -> None:
    script_main(__doc__, run, "3 plugins, one process each (smoke test)")


if __name__ == "__main__":
    main()
