"""``pytest --phases`` (what ``make test`` runs): the run's phases and progress with elapsed time, and a one-line summary.

A phase is a test folder: the first two parts of a test's path (``tests/core``, ``integration_tests/verl``,
``examples/rllm-median-baseline``). When a phase starts, and at least once a minute within one, a line says
where the run is::

    [  3:12] phase 9/15 integration_tests/verl: 212 tests (1,034/3,050 done)

Before pytest's own last line (``3050 passed in ...``, which stays the last line) one line gives the
total and the slowest phases::

    summary: 3,050 tests, 3,040 passed, 10 skipped, 0 failed in 8:41; slowest phases: integration_tests/verl 3:10, ...
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any

import pytest

HEARTBEAT_S = 60.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--phases", action="store_true", help="report each test folder (phase) and the progress with elapsed time, and a summary line")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--phases"):
        config.pluginmanager.register(PhaseReport(config), "phase-report")


def clock(seconds: float) -> str:
    """``m:ss`` (``h:mm:ss`` from an hour)."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def phase_of(nodeid: str) -> str:
    """The test folder of a node id: ``tests/core/test_x.py::test_y`` -> ``tests/core``."""
    parts = PurePosixPath(nodeid.split("::", 1)[0]).parts
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


class PhaseReport:
    """Counts tests per phase at collection, writes a line when a phase starts (and each minute), and the summary."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.start = time.monotonic()
        self.sizes: Counter[str] = Counter()
        self.order: list[str] = []
        self.current: str | None = None
        self.phase_start = self.start
        self.durations: dict[str, float] = {}
        self.done = 0
        self.last_line = self.start
        self.outcomes: Counter[str] = Counter()

    def write(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            if reporter._tw.width_of_current_line:  # after the progress dots of the tests before
                reporter.line("")
            reporter.write_line(line)
        self.last_line = time.monotonic()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            phase = phase_of(item.nodeid)
            if phase not in self.sizes:
                self.order.append(phase)
            self.sizes[phase] += 1

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        now = time.monotonic()
        phase = phase_of(nodeid)
        total = sum(self.sizes.values())
        if phase != self.current:
            self.close_phase(now)
            self.current, self.phase_start = phase, now
            number = self.order.index(phase) + 1 if phase in self.order else 0
            self.write(f"[{clock(now - self.start):>7}] phase {number}/{len(self.order)} {phase}: {self.sizes[phase]:,} tests ({self.done:,}/{total:,} done)")
        elif now - self.last_line >= HEARTBEAT_S:
            self.write(f"[{clock(now - self.start):>7}] {phase}: {self.done:,}/{total:,} done")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            self.done += 1
            self.outcomes[report.outcome] += 1
        elif report.when == "teardown" and report.outcome == "failed":
            self.outcomes["failed"] += 1

    def close_phase(self, now: float) -> None:
        if self.current is not None:
            self.durations[self.current] = self.durations.get(self.current, 0.0) + now - self.phase_start

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Iterator[None]:
        """Around the terminal reporter's summary (its short test summary included): the line comes last but pytest's own."""
        yield
        now = time.monotonic()
        self.close_phase(now)
        self.current = None
        slowest = sorted(self.durations.items(), key=lambda kv: -kv[1])[:3]
        counts = ", ".join(f"{self.outcomes[k]:,} {k}" for k in ("passed", "skipped", "failed"))
        phases = ", ".join(f"{name} {clock(seconds)}" for name, seconds in slowest) or "none"
        terminalreporter.ensure_newline()
        terminalreporter.write_line(f"summary: {sum(self.sizes.values()):,} tests, {counts} in {clock(now - self.start)}; slowest phases: {phases}")
