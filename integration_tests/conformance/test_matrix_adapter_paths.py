"""The conformance matrix on verl's and TRL's paths: every cell holds, is declared, or is a known failure.

``RLLM_CONFORMANCE=full`` (``make conformance``) runs the full budget, ``rllm-plugins verl-check`` on every
hostile option value included; the default is the fast sample.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("verl")
pytest.importorskip("trl")

from rllm_plugins.discovery import manager
from rllm_plugins.spec import AdvEstimatorSpec
from rllm_plugins.testing.matrix import FAST, FULL, KNOWN_FAILURES, RELATIONS, entry_of, estimator_table, installed_paths, path_table, run_cell, run_matrix

FULL_MATRIX = os.environ.get("RLLM_CONFORMANCE") == "full"
BUDGET = FULL if FULL_MATRIX else FAST
SLOW_PATHS = {"verl_v1"}  # every call goes through TransferQueue: the fast sample runs a few estimators there
FAST_ON_SLOW_PATHS = ("grpo", "rloo", "prpo", "gigpo", "step_reinforce", "rae")  # rae: the stateful scan


@pytest.fixture(scope="module")
def adapter_paths():
    from rllm_verl.conformance.v1 import close

    yield {p.name: p for p in installed_paths()}
    close()  # the Ray and TransferQueue the v1 path started


@pytest.mark.parametrize("framework", ["verl", "trl"])
def test_every_adapter_cell_holds_is_declared_or_known(adapter_paths, framework):
    paths = [p for p in adapter_paths.values() if p.framework == framework and p.name not in SLOW_PATHS]
    cells = run_matrix(estimator_table(), paths, BUDGET)
    failing = [str(c) for c in cells if c.status == "FAIL"]
    assert not failing, "\n".join(failing)
    assert sum(c.status == "PASS" for c in cells) > 60


def test_every_v1_cell_holds_is_declared_or_known(adapter_paths):
    entries = [e for e in estimator_table() if FULL_MATRIX or e.name in FAST_ON_SLOW_PATHS]
    cells = run_matrix(entries, [adapter_paths["verl_v1"]], BUDGET)
    failing = [str(c) for c in cells if c.status == "FAIL"]
    assert not failing, "\n".join(failing)
    assert sum(c.status == "PASS" for c in cells) >= 4 * len(entries)


@pytest.mark.parametrize(
    ("path", "checked"),
    [
        ("verl_step_bridge", ("equals_collector", "no_token_rows", "permutation", "scale")),
        ("verl_v1", ("equals_collector", "no_token_rows")),  # the rest of its cells: the full matrix
    ],
)
def test_a_value_based_estimator_gets_the_critics_values_on_verls_step_paths(adapter_paths, path, checked):
    """turn_gae's cells run (the batch carries each step's value; its returns are checked too) instead of being n.a."""
    cells = run_matrix([entry_of("turn_gae")], [adapter_paths[path]], FAST, [r for r in RELATIONS if r.name in checked])
    assert {c.relation: c.status for c in cells} == dict.fromkeys(checked, "PASS"), [str(c) for c in cells]


def test_verls_config_time_takes_a_value_based_estimator_with_its_critic(adapter_paths):
    """verl-check refuses turn_gae without critic.enable=true; the paths' config step sets it for value-based estimators."""
    entry = entry_of("turn_gae")
    adapter_paths["verl_step_bridge"].configure(entry.name, dict(entry.options))  # no ValueError


@pytest.mark.parametrize("name", ["composite", "passk_training", "pkpo"])
def test_verls_config_time_takes_every_sample_option_as_a_user_would_write_it(adapter_paths, name):
    """composite's nested terms go in as a Hydra list, pass@k's k against the samples' largest group (rollout.n): hostile_options' control."""
    entry = entry_of(name)
    adapter_paths["verl_step_bridge"].configure(entry.name, dict(entry.options))  # no ValueError
    if name == "composite":  # the terms are read, not dropped: a misspelt one is refused
        with pytest.raises(ValueError, match="Unknown advantage estimator 'rlo'"):
            adapter_paths["verl_step_bridge"].configure("composite", {"terms": [["grpo", 0.5], ["rlo", 0.5]]})


def test_the_adapters_contribute_their_paths(adapter_paths):
    assert set(adapter_paths) == {"verl_legacy", "verl_step_bridge", "verl_v1", "trl_outcome", "trl_turn"}


def test_known_failures_name_installed_paths():
    names = {p.name for p in path_table()}
    assert {path for _, path, _ in KNOWN_FAILURES} <= names


def _half_list(rewards, **_):
    out = [np.asarray(r, dtype=np.float64) / 2 for r in rewards]
    return out, out


def _whole_batched(values, offsets, **_):
    return np.asarray(values, dtype=np.float64)


@pytest.fixture
def two_forms():
    """An estimator whose batched form (the adapters') differs from its list form (the collector's)."""
    from rllm_verl.registration import register_estimators_into_verl

    spec = AdvEstimatorSpec("conformance_two_forms", fn=_half_list, batched=_whole_batched)
    manager.add_user_estimator(manager.Estimator(spec, manager.Provider("tests", kind="user")))
    register_estimators_into_verl()
    yield spec.name
    manager.remove_user_estimator(spec.name)


@pytest.mark.parametrize("path", ["verl_legacy", "verl_v1", "trl_outcome"])
def test_an_adapter_path_that_disagrees_with_the_collector_fails_its_cell(adapter_paths, two_forms, path):
    relation = next(r for r in RELATIONS if r.name == "equals_collector")
    cell = run_cell(entry_of(two_forms), adapter_paths[path], relation, FAST)
    assert cell.status == "FAIL" and "expected" in cell.message


# ``rllm-plugins check NAME --paths`` (every installed path, verl's v1 too) on the deliberately wrong plugins of
# tests/conformance/wrong_plugins.py: each exits 1 naming a failing cell of the relation of its mistake. All of them take
# minutes (v1 goes through TransferQueue): the fast sample checks one, ``make conformance`` every one;
# tests/conformance/test_wrong_plugins.py runs them all on the core's paths in every run.

_spec = importlib.util.spec_from_file_location("wrong_plugins", Path(__file__).resolve().parents[2] / "tests" / "conformance" / "wrong_plugins.py")
wrong_plugins = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wrong_plugins)
WRONG = wrong_plugins.WRONG
WRONG_FAST_SAMPLE = ("wrong_raises",)  # the vacuous "both refuse" of before, on every path


@pytest.mark.parametrize("name", sorted(WRONG) if FULL_MATRIX else WRONG_FAST_SAMPLE)
def test_check_paths_fails_every_wrong_plugin(adapter_paths, name, capsys):
    from rllm_plugins import cli

    manager.add_user_estimator(manager.Estimator(WRONG[name][0], manager.Provider("wrong-plugins", kind="user")))
    try:
        code = cli.main(["check", name, "--paths"])
    finally:
        manager.remove_user_estimator(name)
    out = capsys.readouterr().out
    assert code == 1, out
    failing = {line.split(" x ")[1].split(":")[0] for line in out.splitlines() if line.startswith("FAIL: ")}
    assert set(WRONG[name][1]) <= failing, out
