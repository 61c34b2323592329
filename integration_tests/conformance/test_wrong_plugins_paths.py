"""``rllm-plugins check NAME --paths`` (every installed path: verl's, v1's and TRL's too) exits 1 on every deliberately wrong
plugin of ``tests/conformance/wrong_plugins.py``, and names a failing cell of the relation of its mistake.

Every plugin through every path takes minutes (verl's v1 path goes through TransferQueue): the fast sample runs
:data:`FAST_SAMPLE`, ``make conformance`` (``RLLM_CONFORMANCE=full``) all of them; ``tests/conformance/test_wrong_plugins.py``
runs all of them on the core's paths in every run."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytest.importorskip("trl")

from rllm_plugins import cli
from rllm_plugins.discovery import manager

_spec = importlib.util.spec_from_file_location("wrong_plugins", Path(__file__).resolve().parents[2] / "tests" / "conformance" / "wrong_plugins.py")
wrong_plugins = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wrong_plugins)
WRONG = wrong_plugins.WRONG
FAST_SAMPLE = ("wrong_raises", "wrong_first_group", "wrong_ignored_option")
NAMES = sorted(WRONG) if os.environ.get("RLLM_CONFORMANCE") == "full" else FAST_SAMPLE


@pytest.fixture(scope="module", autouse=True)
def _stop_transfer_queue():
    """The v1 path starts Ray and TransferQueue in this process: stop them after this module."""
    yield
    from rllm_verl.conformance.v1 import close

    close()


@pytest.mark.parametrize("name", NAMES)
def test_check_paths_fails_every_wrong_plugin(name, capsys):
    manager.add_user_estimator(manager.Estimator(WRONG[name][0], manager.Provider("wrong-plugins", kind="user")))
    try:
        code = cli.main(["check", name, "--paths"])
    finally:
        manager.remove_user_estimator(name)
    out = capsys.readouterr().out
    assert code == 1, out
    failing = {line.split(" x ")[1].split(":")[0] for line in out.splitlines() if line.startswith("FAIL: ")}
    assert set(WRONG[name][1]) <= failing, out
