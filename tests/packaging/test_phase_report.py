"""``pytest --phases`` (``make test``): a line when each test folder starts, and a summary line just before pytest's last."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]

TESTS = {
    "a/b/test_one.py": "import pytest\n\ndef test_passes():\n    pass\n\ndef test_skips():\n    pytest.skip('not here')\n",
    "a/c/test_two.py": "def test_passes():\n    pass\n\ndef test_fails():\n    assert 1 == 2\n",
    "d/test_three.py": "def test_passes():\n    pass\n",
}


def run(tmp_path: Path, *args: str) -> list[str]:
    for name, text in TESTS.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest", *args]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stdout + done.stderr  # one test fails
    return done.stdout.splitlines()


def test_each_phase_starts_with_a_line_and_the_summary_comes_just_before_pytests_last_line(tmp_path):
    lines = run(tmp_path, "--phases")
    starts = [line for line in lines if " phase " in line]
    expected = [r"phase 1/3 a/b: 2 tests \(0/5 done\)", r"phase 2/3 a/c: 2 tests \(2/5 done\)", r"phase 3/3 d: 1 tests \(4/5 done\)"]
    assert len(starts) == 3 and all(re.fullmatch(rf"\[ +0:0\d\] {e}", s) for s, e in zip(starts, expected, strict=True)), starts
    assert re.fullmatch(r"summary: 5 tests, 3 passed, 1 skipped, 1 failed in 0:0\d; slowest phases: (a/b|a/c|d) 0:0\d, .+", lines[-2]), lines[-2]
    assert re.fullmatch(r"=+ 1 failed, 3 passed, 1 skipped in [\d.]+s =+|1 failed, 3 passed, 1 skipped in [\d.]+s", lines[-1]), lines[-1]


def test_without_the_option_nothing_is_added(tmp_path):
    lines = run(tmp_path)
    assert not [line for line in lines if " phase " in line or line.startswith("summary: ")]


def test_the_documented_run_has_the_shape_the_report_prints():
    text = (ROOT / "docs" / "development.md").read_text()
    block = re.search(r"```console\n\$ python -m pytest -q --phases .*?\n(.*?)```", text, re.S).group(1).splitlines()
    starts = [re.fullmatch(r"\[ +\d+:\d\d\] phase (\d+)/(\d+) \S+: (\d+) tests \((\d+)/(\d+) done\)", line) for line in block if " phase " in line]
    assert starts and all(starts), block
    sizes = [int(m.group(3)) for m in starts]
    assert [int(m.group(4)) for m in starts] == [sum(sizes[:i]) for i in range(len(sizes))]
    assert {int(m.group(5)) for m in starts} == {sum(sizes)} and [int(m.group(1)) for m in starts] == list(range(1, len(sizes) + 1))
    summary = re.fullmatch(r"summary: (\d+) tests, (\d+) passed, 0 skipped, 0 failed in \d+:\d\d; slowest phases: .+", block[-2])
    assert summary and int(summary.group(1)) == int(summary.group(2)) == sum(sizes), block[-2]
    assert re.fullmatch(rf"{sum(sizes)} passed in [\d.]+s", block[-1]), block[-1]


def test_a_long_phase_gets_a_progress_line_each_minute(monkeypatch):
    spec = importlib.util.spec_from_file_location("phase_report", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    written: list[str] = []
    reporter = SimpleNamespace(_tw=SimpleNamespace(width_of_current_line=0), line=written.append, write_line=written.append)
    config = SimpleNamespace(pluginmanager=SimpleNamespace(get_plugin=lambda name: reporter))
    now = [0.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    report = module.PhaseReport(config)
    ids = ["tests/a/test_x.py::t1", "tests/a/test_x.py::t2", "tests/a/test_x.py::t3", "tests/b/test_y.py::t1"]
    report.pytest_collection_finish(SimpleNamespace(items=[SimpleNamespace(nodeid=i) for i in ids]))
    for at, nodeid in zip([0.0, 30.0, 95.0, 200.0], ids, strict=True):
        now[0] = at
        report.pytest_runtest_logstart(nodeid, None)
        report.pytest_runtest_logreport(SimpleNamespace(when="call", outcome="passed"))
    assert written == [
        "[   0:00] phase 1/2 tests/a: 3 tests (0/4 done)",
        "[   1:35] tests/a: 2/4 done",  # 95 s after the last line; none at 30 s
        "[   3:20] phase 2/2 tests/b: 1 tests (3/4 done)",
    ]
    assert report.durations == {"tests/a": 200.0}
