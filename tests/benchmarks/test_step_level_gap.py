"""docs/benchmarks.md, section 6: "`find_turns` alone takes about as long as the gap between `rllm_grpo` and the step-level
estimators that write one output" holds for the stored results (about: within 0.6x-1.5x of each gap)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the benchmarks package lives at the repository root

from benchmarks import docs  # noqa: E402
from benchmarks.step_level import ESTIMATOR_PASSES, PART_ROLES, PARTS_PREFIX  # noqa: E402

UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}
CLAIM = "`find_turns` alone takes about as long as the gap between\n`rllm_grpo` and the step-level estimators that write one output"


def seconds(cell: str) -> float:
    value, unit = cell.split()
    return float(value) * UNITS[unit]


def test_the_stored_find_turns_time_is_about_each_one_output_gap_and_the_page_says_so():
    assert CLAIM in docs.DOCS.read_text(encoding="utf-8")
    report = docs.load()["reports"]["step_level"]
    table = next(t for t in report["tables"] if t["title"].startswith("verl: compute_advantage"))
    times = {row[0]: seconds(row[1]) for row in table["rows"]}
    find = times[f"{PARTS_PREFIX}: find_turns ({PART_ROLES['find_turns']})"]
    one_output = [name for name, passes in ESTIMATOR_PASSES.items() if passes.count("spread_to_tokens") == 1]
    assert one_output
    for name in one_output:
        gap = times[name] - times["rllm_grpo"]
        assert 0.6 <= find / gap <= 1.5, f"{name}: gap to rllm_grpo {gap * 1e3:.2f} ms, find_turns {find * 1e3:.2f} ms"
