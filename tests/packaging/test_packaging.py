"""The distribution as a user gets it: a wheel built from a copy of the tree, its metadata, and ``make clean`` afterwards."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import rllm_plugins

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["pyproject.toml", "README.md", "LICENSE", "Makefile", "rllm_plugins", "adapters", "examples/rllm-median-baseline"]
LEFTOVERS = ("build", "dist", "__pycache__")


def pip(*args: str, cwd: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def leftovers(tree: Path) -> list[str]:
    return sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_dir() and (p.name in LEFTOVERS or p.name.endswith(".egg-info")))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A copy of the tree after ``pip wheel .`` and a non-editable install of the example plugin; and the wheel."""
    tree = tmp_path_factory.mktemp("tree")
    ignore = shutil.ignore_patterns("__pycache__", "build", "dist", "*.egg-info")
    for source in SOURCES:
        (shutil.copytree if (ROOT / source).is_dir() else shutil.copy)(ROOT / source, tree / source, **({"ignore": ignore} if (ROOT / source).is_dir() else {}))
    pip("wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", "-w", "dist", ".", cwd=tree)
    pip("install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", "--target", str(tree / "site"), "./examples/rllm-median-baseline", cwd=tree)
    shutil.rmtree(tree / "site")
    (wheel,) = (tree / "dist").glob("rllm_plugins-*.whl")
    return tree, wheel


def test_the_wheel_declares_version_license_urls_and_the_contributed_command(built):
    _, wheel = built
    assert wheel.name == f"rllm_plugins-{rllm_plugins.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        info = f"rllm_plugins-{rllm_plugins.__version__}.dist-info"
        metadata = archive.read(f"{info}/METADATA").decode().split("\n\n")[0].splitlines()
        license_text = archive.read(f"{info}/licenses/LICENSE").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert f"Version: {rllm_plugins.__version__}" in metadata
    assert "License-Expression: Apache-2.0" in metadata and "License-File: LICENSE" in metadata
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert license_text == (ROOT / "LICENSE").read_text()
    urls = [line for line in metadata if line.startswith("Project-URL: ")]
    assert urls and all(", https://" in line for line in urls)
    assert "[rllm_plugins.commands]\nverl-check = rllm_verl.tools.check:main\n" in entry_points
    assert "verl-rehearse = rllm_verl.tools.rehearse:main\n" in entry_points
    assert "[verl.plugins]\nrllm_plugins = rllm_verl.plugin\n" in entry_points


def test_make_clean_removes_everything_the_build_left(built):
    tree, _ = built
    left = leftovers(tree)
    assert "dist" in left and any(p.startswith("examples/rllm-median-baseline/") for p in left), left  # the builds did leave things
    done = subprocess.run(["make", "clean"], cwd=tree, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert leftovers(tree) == []
