"""The distribution as a user gets it: an sdist and a wheel built from a copy of the tree as a release is (``python -m build``),
their contents and metadata, ``twine check``, the wheel in a fresh virtual environment, and ``make clean`` afterwards."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

import pytest

import rllm_plugins

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "MANIFEST.in", "Makefile", "rllm_plugins", "adapters", "examples/rllm-median-baseline"]
PACKAGES = {"rllm_plugins": ROOT / "rllm_plugins", "rllm_verl": ROOT / "adapters" / "rllm_verl", "rllm_trl": ROOT / "adapters" / "rllm_trl"}
PACKAGES["rllm_swift"] = ROOT / "adapters" / "rllm_swift"  # ms-swift
PACKAGES["rllm_axolotl"] = ROOT / "adapters" / "rllm_axolotl"  # axolotl
LEFTOVERS = ("build", "dist", "__pycache__")


def pip(*args: str, cwd: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def leftovers(tree: Path) -> list[str]:
    return sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_dir() and (p.name in LEFTOVERS or p.name.endswith(".egg-info")))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A copy of the tree after ``python -m build`` and a non-editable install of the example plugin; and the wheel."""
    pytest.importorskip("build", reason="the release dependency group (make install) brings build")
    tree = tmp_path_factory.mktemp("tree")
    ignore = shutil.ignore_patterns("__pycache__", "build", "dist", "*.egg-info")
    for source in SOURCES:
        (shutil.copytree if (ROOT / source).is_dir() else shutil.copy)(ROOT / source, tree / source, **({"ignore": ignore} if (ROOT / source).is_dir() else {}))
    for cache in ("__pycache__/x.cpython-311.pyc", "rllm_plugins/__pycache__/cli.cpython-311.pyc"):  # what a test run leaves, kept out
        (tree / cache).parent.mkdir(parents=True, exist_ok=True)
        (tree / cache).write_bytes(b"")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "-o", "dist", "."], cwd=tree, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    pip("install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", "--target", str(tree / "site"), "./examples/rllm-median-baseline", cwd=tree)
    shutil.rmtree(tree / "site")
    (wheel,) = (tree / "dist").glob("rllm_plugins-*.whl")
    return tree, wheel


def sources() -> set[str]:
    """Every module and ``py.typed`` of the core and the adapters, as the wheel names them (``rllm_verl/compute/outcome.py``)."""
    found = set()
    for name, folder in PACKAGES.items():
        for path in folder.rglob("*"):
            if path.is_file() and (path.suffix == ".py" or path.name == "py.typed") and "__pycache__" not in path.parts:
                found.add(f"{name}/{path.relative_to(folder).as_posix()}")
    return found


def test_the_wheel_holds_the_core_the_adapters_and_their_py_typed_and_nothing_else(built):
    _, wheel = built
    info = f"rllm_plugins-{rllm_plugins.__version__}.dist-info"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    expected = sources()
    assert {"rllm_plugins/py.typed", "rllm_verl/py.typed", "rllm_trl/py.typed", "rllm_verl/compute/outcome.py", "rllm_trl/trainer.py"} <= expected
    metadata = {f"{info}/{name}" for name in ("METADATA", "WHEEL", "entry_points.txt", "top_level.txt", "RECORD", "licenses/LICENSE")}
    assert names - metadata == expected  # no tests, examples, benchmarks, docs, conftest or caches
    assert metadata <= names


def test_the_sdist_holds_the_sources_readme_changelog_and_license_and_no_caches(built):
    tree, _ = built
    (sdist,) = (tree / "dist").glob("rllm_plugins-*.tar.gz")
    assert sdist.name == f"rllm_plugins-{rllm_plugins.__version__}.tar.gz"
    with tarfile.open(sdist) as archive:
        names = {PurePosixPath(*PurePosixPath(n).parts[1:]).as_posix() for n in archive.getnames()}
    for top in ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "PKG-INFO"):
        assert top in names, top
    in_sdist = {n.replace("adapters/", "", 1) for n in names if n.startswith(("rllm_plugins/", "adapters/"))}
    assert sources() <= in_sdist
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc") or n.startswith(("tests/", "integration_tests/"))]


def test_twine_check_passes_on_both(built):
    pytest.importorskip("twine", reason="the release dependency group (make install) brings twine")
    tree, _ = built
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *sorted(str(p) for p in (tree / "dist").iterdir())],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2, done.stdout


def test_the_changelogs_newest_entry_is_the_version():
    first = next(line for line in (ROOT / "CHANGELOG.md").read_text().splitlines() if line.startswith("## "))
    assert first.split()[1] == rllm_plugins.__version__, first


def test_the_wheel_installs_in_a_fresh_venv_and_runs_with_only_its_two_dependencies(built, tmp_path):
    """A venv with the wheel alone (no pip, no verl, no TRL) and numpy and pluggy, the two dependencies it declares, linked in."""
    import numpy
    import pluggy

    _, wheel = built
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    pip("--python", str(python), "install", "--quiet", "--no-deps", "--no-index", str(wheel), cwd=tmp_path)
    deps = tmp_path / "deps"
    deps.mkdir()
    for module in (numpy, pluggy):
        site = Path(module.__file__).parent.parent
        for path in [*site.glob(f"{module.__name__}"), *site.glob(f"{module.__name__}.libs"), *site.glob(f"{module.__name__}-*.dist-info")]:
            (deps / path.name).symlink_to(path)
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    (Path(purelib) / "deps.pth").write_text(f"{deps}\n")

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, env={"PATH": "/usr/bin:/bin"})

    done = run(str(venv / "bin" / "rllm-plugins"), "--version")
    assert (done.returncode, done.stdout) == (0, f"rllm-plugins {rllm_plugins.__version__} (verl not installed, TRL not installed)\n"), done.stderr
    found = {}
    for distribution in ("verl", "trl"):  # their metadata alone: --version reads it and imports neither
        found[distribution] = importlib.metadata.version(distribution)
        info = Path(numpy.__file__).parent.parent / f"{distribution}-{found[distribution]}.dist-info"
        (deps / info.name).symlink_to(info)
    done = run(str(venv / "bin" / "rllm-plugins"), "--version")
    assert done.stdout == f"rllm-plugins {rllm_plugins.__version__} (verl {found['verl']}, TRL {found['trl']})\n", done.stderr
    done = run(str(venv / "bin" / "rllm-plugins"), "check", "grpo")
    assert done.returncode == 0 and "grpo" in done.stdout, done.stdout + done.stderr
    done = run(str(python), "-c", "import rllm_verl")
    assert done.stderr.splitlines()[-1] == (
        'ModuleNotFoundError: rllm_verl needs verl and torch, and verl and torch are not installed. Install: pip install "rllm-plugins[verl]"'
    )
    (Path(purelib) / "deps.pth").unlink()  # and without its dependencies it cannot run: the venv is the wheel alone
    done = run(str(venv / "bin" / "rllm-plugins"), "--version")
    assert done.returncode == 1 and done.stderr.splitlines()[-1] == "ModuleNotFoundError: No module named 'numpy'", done.stderr


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
