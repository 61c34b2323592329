"""MkDocs hooks: the site is docs/ plus the repository files its pages link to, with GitHub's heading anchors.

The pages are written to be read on GitHub: ``docs/trl.md`` links ``../examples/trl_multi_turn/README.md``
and the README links ``docs/verl.md#...``. The site mirrors the repository, so these links keep working:

- ``README.md`` is the site's home page (``index.md``), and each file a page links to outside docs/
  (an example's README, its scripts) is added at its repository path (a folder: its ``README.md``);
- every relative link is rewritten from a repository path to the site path of its target;
- headings get GitHub's anchors, the ones the pages link to (``#several-reward-keys-gdpo_reward_keys-...``).

A link to a file that does not exist is left as written, so ``mkdocs build --strict`` fails on it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

LINK = re.compile(r"(\]\()([^)\s]+)(\))")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
SOURCES = ("README.md", "docs/*.md", "examples/*/README.md")


def github_slug(value: str, separator: str = "-") -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, each space a hyphen (none collapsed)."""
    return re.sub(r"[^\w\- ]", "", value.strip().lower()).replace(" ", separator)


def site_path(repo_path: str) -> str:
    """Where the repository file ``repo_path`` is in the site: docs/x.md -> x.md, README.md -> index.md."""
    if repo_path == "README.md":
        return "index.md"
    return repo_path.removeprefix("docs/")


def linked_repo_path(root: Path, page: str, target: str) -> str | None:
    """The repository path a relative link of the page ``page`` (a repository path) leads to, or None."""
    if re.match(r"[a-z]+:", target) or target.startswith(("#", "/")):
        return None
    path = posixpath.normpath(posixpath.join(posixpath.dirname(page), target.partition("#")[0]))
    if path.startswith("../") or not (root / path).exists():
        return None
    return posixpath.join(path, "README.md") if (root / path).is_dir() else path


def prose(markdown: str) -> str:
    return FENCE.sub("", markdown)


def on_config(config: Any) -> Any:
    config.mdx_configs.setdefault("toc", {})["slugify"] = github_slug
    return config


def on_files(files: Files, config: Any) -> Files:
    """Add the README as the home page, and each repository file outside docs/ that a page links to."""
    root = Path(config.config_file_path).parent
    wanted = {"README.md"}
    for pattern in SOURCES:
        for source in sorted(root.glob(pattern)):
            page = source.relative_to(root).as_posix()
            for _, target, _ in LINK.findall(prose(source.read_text(encoding="utf-8"))):
                path = linked_repo_path(root, page, target)
                if path is not None and not path.startswith("docs/"):
                    wanted.add(path)
    for path in sorted(wanted):
        files.append(File.generated(config, site_path(path), abs_src_path=str(root / path)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Rewrite each relative link from the page's repository path to the site path of its target."""
    root = Path(config.config_file_path).parent
    repo_page = Path(page.file.abs_src_path).resolve().relative_to(root.resolve()).as_posix()
    here = posixpath.dirname(page.file.src_uri)

    def rewrite(match: re.Match[str]) -> str:
        target = match.group(2)
        path = linked_repo_path(root, repo_page, target)
        if path is None:
            return match.group(0)
        anchor = target.partition("#")[2]
        relative = posixpath.relpath(site_path(path), here or ".")
        return f"{match.group(1)}{relative}{'#' + anchor if anchor else ''}{match.group(3)}"

    parts = re.split(r"(^```.*?^```)", markdown, flags=re.S | re.M)
    return "".join(part if part.startswith("```") else LINK.sub(rewrite, part) for part in parts)


def on_pre_build(config: Any) -> None:
    """The plugin directory page must be what ``tools/directory.py`` renders now (a warning: ``--strict`` fails on it)."""
    import importlib.util
    import logging
    import sys

    generator = Path(config.config_file_path).parent / "tools" / "directory.py"
    if not generator.is_file():  # a tree without the generator (a copy of docs/ alone): nothing to compare
        return
    spec = importlib.util.spec_from_file_location("rllm_plugins_directory", generator)
    directory = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = directory  # its dataclasses look their module up
    spec.loader.exec_module(directory)
    if directory.PAGE.read_text(encoding="utf-8") != directory.rendered_now():
        logging.getLogger("mkdocs.hooks").warning(f"docs/directory.md is not what {directory.RENDER} renders now: run {directory.REFRESH}")
