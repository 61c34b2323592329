"""docs/bench.md and docs/cli.md say what ``rllm-plugins bench`` does: its options, its JSON fields, the shape ``make bench`` runs.

The page's command lines run as they are written (tests/packaging/test_docs_command_lines.py runs every ``rllm-plugins``
line of a shell block of docs/).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from rllm_plugins.bench.batch import Shape
from rllm_plugins.bench.engine import BenchConfig, BenchResult, Request, run_bench
from rllm_plugins.bench.paths import CORE
from rllm_plugins.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "bench.md").read_text()


def region(name: str) -> str:
    return re.search(rf"<!-- bench {name} -->(.*?)<!-- /bench {name} -->", PAGE, re.S).group(1)


def test_the_page_lists_every_field_of_a_row_and_of_the_report() -> None:
    listed = re.findall(r"`(\w+)`", region("row fields"))
    assert listed == [f.name for f in dataclasses.fields(BenchResult)]
    report = run_bench(BenchConfig(Shape(8, 24, 4, 2), (Request("core", "grpo"),), {"core": CORE}, repeats=1, budget_s=0.0, min_runs=1, memory=False))
    prose = set(re.findall(r"`(\w+)`", PAGE.split("`--json FILE` writes the report:", 1)[1].split("<!-- bench row fields -->", 1)[0]))
    assert set(report) <= prose and set(report["shape"]) <= prose


def test_the_page_names_the_shape_make_bench_runs() -> None:
    from benchmarks.bench_command import SHAPE

    assert region("make-bench shape") == f"`{SHAPE.label()}`"


def test_the_command_page_lists_every_option_of_bench() -> None:
    block = re.search(r"## Command line\n\n```\n(.*?)```", (ROOT / "docs" / "cli.md").read_text(), re.S).group(1)
    line = next(line for line in block.splitlines() if line.startswith("rllm-plugins bench "))
    listed = re.findall(r"\[(--[a-z-]+)\]", line)
    bench = build_parser()._subparsers._group_actions[0].choices["bench"]
    options = [o for action in bench._actions for o in action.option_strings if o.startswith("--") and o != "--help"]
    assert listed == options
