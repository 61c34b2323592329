"""The release command (tools/release.py, ``make release``): its checks in dry-run mode on the current tree, and its refusals."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

import rllm_plugins

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("rllm_plugins_release", ROOT / "tools" / "release.py")
release = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = release
_spec.loader.exec_module(release)


def what_a_release_writes() -> tuple[bytes, list[str]]:
    """The version file and every build output at the top of the tree: what a release would change."""
    outputs = sorted(str(p.relative_to(ROOT)) for pattern in ("dist/*", "build", "*.egg-info", "tools/dist", "tools/build") for p in ROOT.glob(pattern))
    return (ROOT / "rllm_plugins" / "__init__.py").read_bytes(), outputs


def test_a_dry_run_builds_checks_installs_and_smoke_tests_the_current_version_and_leaves_the_tree_as_it_was():
    """The clean-venv part here links this environment's dependencies (--deps local) and runs the core smoke test;
    ``make release`` installs them from the index and runs the demo's first table (docs/development.md)."""
    pytest.importorskip("build", reason="the release dependency group (make install) brings build")
    pytest.importorskip("twine", reason="the release dependency group (make install) brings twine")
    before = what_a_release_writes()
    version = rllm_plugins.__version__
    done = subprocess.run(
        [sys.executable, "tools/release.py", version, "--dry-run", "--smoke", "core", "--deps", "local"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(" ")[1] for line in lines] == ["1/5", "2/5", "3/5", "4/5", "5/5"], done.stdout
    assert f"built rllm_plugins-{version}.tar.gz and rllm_plugins-{version}-py3-none-any.whl" in lines[1]
    assert re.search(rf"rllm-plugins {re.escape(version)} .*check grpo: OK; collector call: {re.escape(version)} \[", lines[3]), lines[3]
    assert lines[4] == f"release: 5/5 dry run: the tree is unchanged (__version__ stays {version}; nothing written to dist/)"
    assert what_a_release_writes() == before


def test_a_version_without_its_changelog_section_is_refused_naming_the_fix(tmp_path):
    changelog = tmp_path / "CHANGELOG.md"
    changelog.write_text("# Changelog\n\n## 0.2.0 (2027-01-15)\n\n- x\n\n## 0.1.0\n\n- y\n")
    assert release.check_changelog("0.2.0", changelog) == "## 0.2.0 (2027-01-15)"
    with pytest.raises(release.ReleaseError, match=re.escape("CHANGELOG.md has no section for 0.3.0: add '## 0.3.0' and what it changed at the top")):
        release.check_changelog("0.3.0", changelog)
    with pytest.raises(release.ReleaseError, match=re.escape("section for 0.1.0 is not its newest")):
        release.check_changelog("0.1.0", changelog)
    with pytest.raises(release.ReleaseError, match="not a release version"):
        release.check_version("1.0")
    with pytest.raises(release.ReleaseError, match=re.escape("--smoke demo needs its dependencies installed (--deps index)")):
        release.release("0.1.0", dry_run=True, smoke="demo", deps="local", torch_spec="torch", framework_spec="")
    done = subprocess.run([sys.executable, "tools/release.py", "99.0.0", "--dry-run"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1 and done.stderr.startswith("release: refused: CHANGELOG.md has no section for 99.0.0"), done.stderr


def test_the_metadata_check_names_what_the_package_index_would_lack():
    readme = "# r\n"
    good = {
        "Name": ["rllm-plugins"],
        "Version": ["1.0.0"],
        "Summary": ["s"],
        "License-Expression": ["Apache-2.0"],
        "License-File": ["LICENSE"],
        "Requires-Python": [">=3.10,<3.13"],
        "Keywords": ["rl"],
        "Description-Content-Type": ["text/markdown"],
        "Project-URL": ["verl, https://github.com/volcengine/verl"],
        "Classifier": ["Programming Language :: Python :: 3.10", "Programming Language :: Python :: 3.11", "Programming Language :: Python :: 3.12"],
        "Provides-Extra": ["verl", "trl"],
        "Requires-Dist": ['verl<0.10,>=0.7.1; extra == "verl"', 'trl<1.17,>=1.14; extra == "trl"'],
    }
    assert release.metadata_problems(good, readme, "1.0.0", readme) == []
    bad = {**good, "Classifier": good["Classifier"][:2], "Requires-Dist": ['verl>=0.7.1; extra == "verl"', good["Requires-Dist"][1]]}
    del bad["Keywords"]
    assert release.metadata_problems(bad, "other", "1.0.1", readme) == [
        "Version is '1.0.0', not '1.0.1'",
        "no Keywords (pyproject.toml [project])",
        "the long description is not README.md as markdown (readme = 'README.md')",
        "the Python classifiers ['3.10', '3.11'] are not the versions requires-python allows ['3.10', '3.11', '3.12']",
        "the [verl] extra does not pin verl to a range (>=low,<high): ['verl>=0.7.1; extra == \"verl\"']",
    ]
    assert release.content_problems(["rllm_plugins/py.typed", "rllm_verl/py.typed", "tests/test_x.py"], _empty_sdist()) == [
        "the wheel has no rllm_trl/py.typed",
        "the wheel ships test, example or cache files: ['tests/test_x.py']",
    ]


def _empty_sdist() -> Path:
    import tarfile
    import tempfile

    path = Path(tempfile.mkdtemp()) / "x-1.0.tar.gz"
    with tarfile.open(path, "w:gz"):
        pass
    return path
