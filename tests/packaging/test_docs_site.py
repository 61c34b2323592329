"""The documentation site: ``mkdocs build --strict`` builds docs/ with the README as home, every page in the nav,
links rewritten to the site's paths; a broken link or heading fails the build."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="the docs dependency group (make install) brings mkdocs")

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs_hooks.py")
hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hooks)


def build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(root / "mkdocs.yml"), "--site-dir", str(site)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def nav_pages() -> set[str]:
    return set(re.findall(r":\s+(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M))


def test_the_nav_names_every_page_of_docs_the_readme_as_home_and_the_examples_readmes():
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} | {"index.md", "CHANGELOG.md"}
    pages |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "examples").glob("*/README.md")}
    assert nav_pages() == pages


def test_the_site_builds_strictly_with_the_readme_as_home_and_links_to_site_paths(tmp_path):
    done = build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stderr[-3000:]
    home = (tmp_path / "site" / "index.html").read_text()
    assert "<h1" in home and "rllm-plugins" in home and 'href="verl/"' in home  # README's docs/verl.md, as the site has it
    trl = (tmp_path / "site" / "trl" / "index.html").read_text()
    assert 'href="../examples/trl_multi_turn/rollout_func.py"' in trl  # ../examples/... from docs/trl.md
    assert (tmp_path / "site" / "examples" / "trl_multi_turn" / "rollout_func.py").read_bytes() == (
        ROOT / "examples/trl_multi_turn/rollout_func.py"
    ).read_bytes()


def test_a_broken_link_or_heading_fails_the_build(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("mkdocs.yml", "docs_hooks.py", "README.md", "CHANGELOG.md", "docs", "examples"):
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, root / name)
    with (root / "docs" / "cli.md").open("a") as page:
        page.write("\n[a](semantics.md#no-such-heading) [b](../examples/no_such_file.py)\n")
    done = build(root, tmp_path / "site")
    assert done.returncode == 1
    assert "contains a link '../examples/no_such_file.py', but the target is not found among documentation files" in done.stderr
    assert "does not contain an anchor '#no-such-heading'" in done.stderr


def test_the_hooks_map_repository_paths_to_site_paths_and_give_githubs_anchors():
    assert (
        hooks.github_slug("Several reward keys: `gdpo_reward_keys` with any `rllm_*` estimator")
        == "several-reward-keys-gdpo_reward_keys-with-any-rllm_-estimator"
    )
    assert hooks.github_slug("TRL setting → what RLLMGRPOTrainer does with it") == "trl-setting--what-rllmgrpotrainer-does-with-it"
    assert [hooks.site_path(p) for p in ("README.md", "docs/verl.md", "examples/x/README.md")] == ["index.md", "verl.md", "examples/x/README.md"]
    assert hooks.linked_repo_path(ROOT, "docs/plugins.md", "../examples/rllm-median-baseline") == "examples/rllm-median-baseline/README.md"
    assert hooks.linked_repo_path(ROOT, "README.md", "docs/verl.md#in-short") == "docs/verl.md"
    assert hooks.linked_repo_path(ROOT, "docs/trl.md", "../examples/nothing.py") is None  # left as written: the build fails on it
    assert hooks.linked_repo_path(ROOT, "docs/trl.md", "https://example.org/a.md") is None
