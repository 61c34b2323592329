"""Real plugin distributions for the plugin tests: the projects in ``fixtures/``, pip-installed once per session.

Tests put the install directory on ``sys.path`` (in process) or ``PYTHONPATH`` (subprocesses);
every fixture here restores ``sys.path``, the environment, ``sys.modules`` and the plugin state.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rllm_plugins.discovery.manager import DISABLE_ENV, STRICT_ENV, plugin_state, reset_plugins

FIXTURES = Path(__file__).parent / "fixtures"
MISTAKES = Path(__file__).parent / "mistakes"
FIXTURE_MODULE_PREFIX = "rllm_fixture_"
INSTALLED_MARKER = "installed.ok"


def _fixtures_digest(fixtures: Path) -> str:
    digest = hashlib.sha256(sys.version.encode())
    for path in sorted(p for p in fixtures.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(fixtures)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


@pytest.fixture(scope="session")
def plugin_site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding every fixture distribution (``*.dist-info`` with its entry points), installed by pip.

    The install is kept in pytest's cache, keyed by the fixtures' contents, so only the first run pays for pip.
    """
    return _installed_site(FIXTURES, "rllm-fixture-plugins", request, tmp_path_factory)


@pytest.fixture(scope="session")
def mistakes_site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Like :func:`plugin_site`, for the distributions of ``mistakes/``: plugins with a slip that installs without complaint."""
    return _installed_site(MISTAKES, "rllm-fixture-mistakes", request, tmp_path_factory)


def _installed_site(fixtures: Path, cache_name: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = getattr(request.config, "cache", None)
    digest = _fixtures_digest(fixtures)
    site = cache.mkdir(cache_name) / digest if cache is not None else tmp_path_factory.mktemp(cache_name) / "site"
    if (site / INSTALLED_MARKER).is_file():
        return site
    staging = tmp_path_factory.mktemp("plugin-staging")
    _pip_install_fixtures(fixtures, staging / "sources", staging / "site")
    (staging / "site" / INSTALLED_MARKER).touch()
    shutil.rmtree(site, ignore_errors=True)
    shutil.move(staging / "site", site)
    return site


def _pip_install_fixtures(fixtures: Path, sources: Path, site: Path) -> None:
    projects = []
    for project in sorted(p for p in fixtures.iterdir() if (p / "pyproject.toml").is_file()):
        projects.append(shutil.copytree(project, sources / project.name, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info")))
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", "--target", str(site), *map(str, projects)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"installing the fixture plugins failed:\n{done.stdout}\n{done.stderr}"


@pytest.fixture
def load_plugins(plugin_site: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., list[str]]]:
    """``load(**env)``: discover plugins (fixture distributions included) under ``env``; returns the RuntimeWarnings' texts."""
    monkeypatch.syspath_prepend(str(plugin_site))
    monkeypatch.delenv(STRICT_ENV, raising=False)
    monkeypatch.delenv(DISABLE_ENV, raising=False)

    def load(**env: str) -> list[str]:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        reset_plugins()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            plugin_state()
        return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]

    yield load
    reset_plugins()
    for module in [m for m in sys.modules if m.startswith(FIXTURE_MODULE_PREFIX)]:
        del sys.modules[module]


@pytest.fixture
def cli_env(plugin_site: Path) -> dict[str, str]:
    """Environment of a subprocess that sees the fixture distributions (and no plugin variables)."""
    env = {k: v for k, v in os.environ.items() if k not in (STRICT_ENV, DISABLE_ENV)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(plugin_site), env.get("PYTHONPATH")]))
    return env
