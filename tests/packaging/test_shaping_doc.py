"""docs/shaping.md: every Python snippet runs and prints what the page says; its tables are the program's."""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import re
from importlib.util import find_spec
from pathlib import Path

import pytest

from rllm_plugins.shaper_spec import SHAPER_CONTEXT, shaper_options
from rllm_plugins.shaping import unregister_reward_shaper
from rllm_plugins.shaping.builtin import BUILTIN_SHAPERS
from rllm_plugins.shaping.contract import SHAPER_RULES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "shaping.md"
TEXT = PAGE.read_text()


def snippets() -> list[tuple[str, str | None]]:
    """Each ``python`` block with the block of ``prints`` that follows it (None when none does)."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"```python\n(.*?)```\n(?:\nprints\n\n```\n(.*?)```)?", TEXT, re.S)]


def test_the_page_has_its_snippets():
    assert [printed is not None for _, printed in snippets()] == [True, True, True]


@pytest.mark.parametrize("index", range(3))
def test_every_snippet_runs_and_prints_what_the_page_says(index, tmp_path):
    code, printed = snippets()[index]
    if "rllm_trl" in code and find_spec("trl") is None:
        pytest.skip("TRL is not installed in this environment")
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(tmp_path)  # the TRL snippet's output_dir
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"{PAGE}:snippet{index}", "exec"), {"__name__": "__main__"})
    finally:
        os.chdir(cwd)
        with contextlib.suppress(ValueError):
            unregister_reward_shaper("tool_budget")
    assert out.getvalue() == printed


def test_the_context_table_is_the_programs():
    section = TEXT.split("## What a shaper receives", 1)[1].split("Where each value comes from", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| (.*?) \|$", section, re.M))
    assert rows == dict(SHAPER_CONTEXT)


def test_the_built_ins_table_names_every_built_in_with_its_options_and_defaults():
    section = TEXT.split("## Built-ins", 1)[1].split("##", 1)[0]
    rows = {name: options for name, options in re.findall(r"^\| `(\w+)` \| (.*?) \|", section, re.M)}
    assert set(rows) == {spec.name for spec in BUILTIN_SHAPERS}
    for spec in BUILTIN_SHAPERS:
        options, row = shaper_options(spec), rows[spec.name]
        assert set(re.findall(r"`(\w+)`", row)) == set(options), spec.name
        for name, default in options.items():
            if default is inspect.Parameter.empty:  # named before "(required)"
                assert f"`{name}`" in row.split("(required)")[0], (spec.name, name)
            else:
                shown = f'"{default}"' if isinstance(default, str) else repr(default)
                assert f"`{name}` ({shown})" in row, (spec.name, name, shown)


def test_the_check_rules_table_is_the_programs():
    section = TEXT.split("## `rllm-plugins check` for a shaper", 1)[1]
    rows = dict(re.findall(r"^\| ([a-z][^|]*?) \| (.*?) \|$", section, re.M))
    assert rows == {"rule": "demands", **SHAPER_RULES}
