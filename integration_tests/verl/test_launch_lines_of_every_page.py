"""Every verl launch and ``verl-check`` line of the README and docs/ passes ``rllm-plugins verl-check`` (docs/verl.md has its own test).

A launch ``python -m verl.trainer.main_ppo OVERRIDES ...`` composes into verl's config with its overrides and
passes the check (the name resolves, its options, a trial through the trainer's advantage path); a
``rllm-plugins verl-check ...`` line exits 0. The lines are read as tests/packaging/test_docs_command_lines.py reads them.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

pytest.importorskip("verl")
from rllm_verl.tools.check import main, verl_check

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*/README.md"))]


def shell_lines(page: Path) -> list[list[str]]:
    commands = []
    for lang, block in re.findall(r"^```(\w*)\n(.*?)^```", page.read_text(), re.S | re.M):
        if lang in ("bash", "sh", "shell"):
            commands += [shlex.split(line, comments=True) for line in block.replace("\\\n", " ").splitlines()]
    return [argv for argv in commands if argv]


LINES = [(page.relative_to(ROOT).as_posix(), argv) for page in PAGES if page.name != "verl.md" for argv in shell_lines(page)]
LAUNCHES = [(page, argv) for page, argv in LINES if argv[:3] == ["python", "-m", "verl.trainer.main_ppo"]]
CHECKS = [(page, argv) for page, argv in LINES if argv[:2] == ["rllm-plugins", "verl-check"]]


def test_the_pages_have_launch_and_check_lines():
    assert {page for page, _ in LAUNCHES} >= {"README.md", "docs/plugins.md", "docs/running_baselines.md"} and CHECKS


@pytest.mark.parametrize("item", LAUNCHES, ids=lambda item: f"{item[0]}: {' '.join(item[1][3:5])}")
def test_every_launch_passes_verl_check(item):
    _, argv = item
    report = verl_check([a for a in argv[3:] if a != "..."])
    assert report.ok, report


@pytest.mark.parametrize("item", CHECKS, ids=lambda item: f"{item[0]}: {' '.join(item[1][2:4])}")
def test_every_verl_check_line_exits_0(item):
    _, argv = item
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(argv[2:]) == 0
