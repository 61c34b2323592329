"""Every deliberately wrong plugin of ``wrong_plugins.py`` fails the conformance matrix on the core's paths (the relation that
names its mistake among the failing cells), and ``rllm-plugins check`` reports what its contract rules see."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rllm_plugins.discovery import manager
from rllm_plugins.testing import check_estimator
from rllm_plugins.testing.matrix import FAST, RELATIONS, core_paths, entry_of, run_cell, run_matrix

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


CONTRACT_MISSES = {"wrong_clipped": "the contract compares no two reward scales (its extreme case stops at 1e30): only the matrix's scale relation sees it"}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_check_fails_every_wrong_plugin_but_the_one_only_the_matrix_sees(name):
    """Before: wrong_ignored_option and wrong_empty_group passed every rule of ``rllm-plugins check`` (no options_matter rule for
    outcome-level estimators, no empty group among the cases)."""
    report = check_estimator(WRONG[name][0])
    assert report.ok == (name in CONTRACT_MISSES), str(report)


def test_check_names_the_ignored_option_and_how_to_declare_it():
    report = check_estimator(WRONG["wrong_ignored_option"][0])
    assert [v.rule for v in report.violations] == ["options_matter"]
    assert report.violations[0].message == (
        "option 'temperature' never changed the output (tried [0.5, 0.0, 2.0, 0.9] against the default 1.0 on 10 cases); an estimator "
        "that ignores an option misleads its users: read it, leave it out of the signature, or declare why: "
        "AdvEstimatorSpec(breaks={'option_sensitivity:temperature': ...})"
    )


def test_a_state_of_numpy_scalars_is_kept_as_owners_keep_it_on_the_forms_paths(installed):
    """Before: the list and batched forms' state went to JSON raw, so np.float32 raised a raw TypeError in state_roundtrip; the
    owners (collector, verl, TRL) keep it as a float, and so do the forms' paths now."""
    installed("wrong_float32_state")
    relation = next(r for r in RELATIONS if r.name == "state_roundtrip")
    for path in ("list_form", "batched_form", "collector"):
        assert run_cell(entry_of("wrong_float32_state"), CORE[path], relation, FAST).status == "PASS", path


CORE = {p.name: p for p in core_paths()}
