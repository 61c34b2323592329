"""Every deliberately wrong plugin of ``wrong_plugins.py`` fails the conformance matrix on the core's paths (the relation that
names its mistake among the failing cells), and ``rllm-plugins check`` reports what its contract rules see."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rllm_plugins.discovery import manager
from rllm_plugins.testing.matrix import FAST, core_paths, entry_of, run_matrix

_spec = importlib.util.spec_from_file_location("wrong_plugins", Path(__file__).with_name("wrong_plugins.py"))
wrong_plugins = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wrong_plugins)
WRONG = wrong_plugins.WRONG


@pytest.fixture
def installed():
    """Register one wrong plugin's spec for one test, as an installed plugin would be."""
    names: list[str] = []

    def install(name: str) -> None:
        manager.add_user_estimator(manager.Estimator(WRONG[name][0], manager.Provider("wrong-plugins", kind="user")))
        names.append(name)

    yield install
    for name in names:
        manager.remove_user_estimator(name)


def test_the_fixture_holds_at_least_eighteen_kinds_of_mistake():
    assert len(WRONG) >= 18


@pytest.mark.parametrize("name", sorted(WRONG))
def test_the_matrix_fails_every_wrong_plugin_on_the_relation_of_its_mistake(installed, name):
    installed(name)
    cells = run_matrix([entry_of(name)], core_paths(), FAST)
    failed = {c.relation for c in cells if c.status == "FAIL"}
    assert set(WRONG[name][1]) <= failed, [str(c) for c in cells if c.status != "n.a."]
