"""What the README and docs/ say matches what the program does: signatures, links, snippets, options, quoted output."""

from __future__ import annotations

import ast
import builtins
import contextlib
import inspect
import io
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import rllm_plugins
from rllm_plugins import AdvEstimatorSpec
from rllm_plugins.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*/README.md"))]
SCRIPT = Path(sys.executable).parent / "rllm-plugins"


def python_block(page: str, heading: str) -> str:
    """The first Python block after ``## heading`` in ``page``."""
    return re.search(rf"## {re.escape(heading)}\n.*?```python\n(.*?)```", (ROOT / page).read_text(), re.S).group(1)


def rendered_signature(cls: type) -> str:
    def default(value: object) -> str:
        return f'"{value}"' if isinstance(value, str) else repr(value)

    params = inspect.signature(cls).parameters.values()
    return ", ".join(p.name if p.default is inspect.Parameter.empty else f"{p.name}={default(p.default)}" for p in params)


def test_every_adv_estimator_spec_signature_in_the_docs_is_the_dataclasss():
    found = {str(page.relative_to(ROOT)): re.findall(r"AdvEstimatorSpec\((name, fn=None.*?)\)`", page.read_text()) for page in PAGES}
    assert found["docs/plugins.md"]
    expected = rendered_signature(AdvEstimatorSpec)
    for page, signatures in found.items():
        for signature in signatures:
            assert signature == expected, page


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_a_folder_with_a_readme_or_a_heading(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists(), f"{page.name}: {target}"
        if resolved.is_dir():
            assert (resolved / "README.md").is_file(), f"{page.name}: {target} is a folder without a README.md"
        if anchor and resolved.suffix == ".md":
            headings = re.findall(r"^#+ (.*)$", re.sub(r"```.*?```", "", resolved.read_text(), flags=re.S), re.M)
            assert anchor in {slug(h) for h in headings}, f"{page.name}: {target}: no such heading"


def test_help_of_the_package_shows_the_core_api_example_and_it_prints_what_it_says():
    example = python_block("docs/core_api.md", "The core API in 15 lines")
    doc = rllm_plugins.__doc__ or ""
    after = doc[doc.index("::\n") + 3 :].splitlines()
    end = next((i for i, line in enumerate(after) if line.strip() and not line.startswith("    ")), len(after))
    assert textwrap.dedent("\n".join(after[:end])).strip() == example.strip()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(example, "docs/core_api.md example", "exec"), {})
    first = out.getvalue().splitlines()[0]
    claimed = re.search(r"# ([-\d.]+):", example).group(1)  # the value the comment says the first print shows
    assert first == claimed


def defined_names(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def test_every_python_snippet_of_the_trl_page_uses_only_names_it_or_the_complete_script_defines():
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "trl.md").read_text(), re.S)
    script = next(b for b in blocks if "trainer.train()" in b and "build_tiny_tokenizer" in b)
    known = defined_names(ast.parse(script)) | set(dir(builtins))
    for block in blocks:
        tree = ast.parse(block)
        used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
        assert used <= known | defined_names(tree), f"undefined in a docs/trl.md snippet: {sorted(used - known - defined_names(tree))}\n{block}"


def test_the_command_page_lists_every_option_of_every_built_in_command():
    block = re.search(r"## Command line\n\n```\n(.*?)```", (ROOT / "docs" / "cli.md").read_text(), re.S).group(1)
    commands = build_parser()._subparsers._group_actions[0].choices
    for name in ("estimators", "transforms", "plugins", "check", "new"):
        line = next(line for line in block.splitlines() if line.startswith(f"rllm-plugins {name} "))
        listed = set(re.findall(r"\[(--[a-z-]+)\]", line.split("  ")[0]))
        options = {o for action in commands[name]._actions for o in action.option_strings if o.startswith("--") and o != "--help"}
        assert listed == options, name


def console_sessions(page: Path) -> list[tuple[str, list[str]]]:
    """``(command, quoted output lines)`` of every ``$ rllm-plugins ...`` line in the page's console blocks."""
    sessions: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", page.read_text(), re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                sessions.append((line[2:], []))
            elif sessions:
                sessions[-1][1].append(line)
    return [(command, lines) for command, lines in sessions if command.startswith("rllm-plugins ")]


def test_the_example_plugins_readme_quotes_what_the_commands_print():
    sessions = console_sessions(ROOT / "examples" / "rllm-median-baseline" / "README.md")
    assert sessions
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RLLM_PLUGINS")}, "COLUMNS": "200"}
    for command, quoted in sessions:
        done = subprocess.run([str(SCRIPT), *command.split()[1:]], capture_output=True, text=True, env=env, timeout=120, check=True)
        printed = {" ".join(line.split()) for line in done.stdout.splitlines()}
        for line in quoted:
            assert " ".join(line.split()) in printed, f"{command}: {line!r} is not in its output:\n{done.stdout}"
