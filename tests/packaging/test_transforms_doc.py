"""docs/transforms.md: every Python snippet runs and prints what the page says; its tables are the program's."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest

from rllm_plugins.transform_spec import CONTEXT_KEYWORDS, transform_options
from rllm_plugins.transforms import unregister_advantage_transform
from rllm_plugins.transforms.builtin import BUILTIN_TRANSFORMS
from rllm_plugins.transforms.contract import COMMON_RULES, ELEMENTWISE, RULES, SEQUENCE_RULES, TOKEN_RULES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "transforms.md"
TEXT = PAGE.read_text()


def snippets() -> list[tuple[str, str | None]]:
    """Each ``python`` block with the block of ``prints`` that follows it (None when none does)."""
    out = []
    for match in re.finditer(r"```python\n(.*?)```\n(?:\nprints\n\n```\n(.*?)```)?", TEXT, re.S):
        out.append((match.group(1), match.group(2)))
    return out


def test_the_page_has_its_snippets():
    assert len(snippets()) == 4 and sum(printed is not None for _, printed in snippets()) == 3


@pytest.mark.parametrize("index", range(4))
def test_every_snippet_runs_and_prints_what_the_page_says(index):
    code, printed = snippets()[index]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"{PAGE}:snippet{index}", "exec"), {"__name__": f"transforms_doc_{index}"})
    finally:
        with contextlib.suppress(ValueError):
            unregister_advantage_transform("longer_is_worse")
    if printed is not None:
        assert out.getvalue() == printed


def test_the_context_table_is_the_programs():
    section = TEXT.split("## What a transform receives", 1)[1]
    rows = dict(re.findall(r"^\| `(\w+)` \| (.*?) \|$", section, re.M))
    assert rows == dict(CONTEXT_KEYWORDS)


def test_the_built_ins_table_names_every_built_in_with_its_options():
    section = TEXT.split("## Built-ins", 1)[1].split("##", 1)[0]
    rows = {name: options for name, _level, options in re.findall(r"^\| `(\w+)` \| (.*?) \| (.*?) \|", section, re.M)}
    assert set(rows) == {spec.name for spec in BUILTIN_TRANSFORMS}
    for spec in BUILTIN_TRANSFORMS:
        assert set(re.findall(r"`(\w+)`", rows[spec.name])) >= set(transform_options(spec)), spec.name


def test_the_check_rules_table_is_the_programs():
    section = TEXT.split("## `rllm-plugins check` for a transform", 1)[1]
    rows = dict(re.findall(r"^\| ([a-z][^|]*?) \| (.*?) \|$", section, re.M))
    assert rows == {"rule": "demands", **RULES}
    assert list(RULES) == [*SEQUENCE_RULES, *TOKEN_RULES, *COMMON_RULES, "masked tokens", ELEMENTWISE]


def test_the_precision_example_is_what_float16_does():
    assert "grpo's 1.7320508 becomes 1.732421875" in TEXT
    assert float(np.float16(1.7320508)) == 1.732421875
