"""The command's tables fit the terminal: ``estimators`` wraps its descriptions, with room for one more short column."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rllm_plugins.tables import format_table

SCRIPT = Path(sys.executable).parent / "rllm-plugins"


def run(env: dict[str, str], *args: str, columns: int) -> str:
    done = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env={**env, "COLUMNS": str(columns)}, timeout=120, check=True)
    return done.stdout


@pytest.mark.parametrize("columns", [80, 100, 140])
def test_the_estimators_table_fits_the_terminal_and_keeps_every_word(cli_env, columns):
    lines = run(cli_env, "estimators", columns=columns).splitlines()
    assert max(map(len, lines)) <= columns
    text = " ".join(" ".join(lines).split())
    for row in json.loads(run(cli_env, "estimators", "--json", columns=columns)):
        assert " ".join(row["description"].replace("``", "`").split()) in text, row["name"]


def test_descriptions_show_no_restructuredtext_double_backticks(cli_env):
    assert "``" in " ".join(row["description"] for row in json.loads(run(cli_env, "estimators", "--json", columns=100)))  # some docstrings use them
    assert "``" not in run(cli_env, "estimators", columns=100)


@pytest.mark.parametrize("columns", [80, 100])
def test_one_more_short_column_still_fits(cli_env, columns):
    rows = json.loads(run(cli_env, "estimators", "--json", columns=columns))
    table = [[row["name"], "built-in", "outcome", row["description"]] for row in rows]
    lines = format_table(["NAME (ALIASES)", "PROVIDER", "LEVEL", "DESCRIPTION"], table, width=columns).splitlines()
    assert max(map(len, lines)) <= columns


def test_without_a_width_nothing_is_wrapped():
    assert format_table(["A", "B"], [["x", "a long description " * 10]]).splitlines()[1] == "x  " + ("a long description " * 10).rstrip()


def test_the_default_width_applies_when_the_output_is_no_terminal(cli_env):
    env = {k: v for k, v in cli_env.items() if k != "COLUMNS"}
    done = subprocess.run([str(SCRIPT), "estimators"], capture_output=True, text=True, env=env, timeout=120, check=True)
    assert max(map(len, done.stdout.splitlines())) <= 100
