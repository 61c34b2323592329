"""Plugins with a slip that installs without complaint are reported, naming the entry point and the fix.

Real distributions from ``mistakes/``: ``rllm-fixture-misplaced`` declares its entry points under
``rllm_plugin`` (no ``s``) and ``verl.plugin``; ``rllm-fixture-typo`` names a module (``plugn``) and
an attribute (``Hoks``) that do not exist.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rllm_plugins.discovery.mistakes import near_miss_group
from rllm_plugins.registry import UnknownEstimatorError, get_estimator

SCRIPT = Path(sys.executable).parent / "rllm-plugins"

MISPLACED = (
    "distribution rllm-fixture-misplaced 0.1.0 declares the entry point max_baseline = 'rllm_fixture_misplaced' in the group 'rllm_plugin', "
    "which nothing reads, so it is never loaded. Fix: in its pyproject.toml, rename [project.entry-points.rllm_plugin] to "
    "[project.entry-points.rllm_plugins], then reinstall it"
)


@pytest.fixture
def mistakes_env(cli_env: dict[str, str], mistakes_site: Path) -> dict[str, str]:
    return {**cli_env, "PYTHONPATH": f"{mistakes_site}:{cli_env['PYTHONPATH']}"}


@pytest.fixture
def load_with_mistakes(load_plugins, mistakes_site: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(mistakes_site))
    return load_plugins


def plugins_json(env: dict[str, str], *options: str) -> tuple[int, dict[str, dict], str]:
    done = subprocess.run([str(SCRIPT), "plugins", "--json", *options], capture_output=True, text=True, env=env, timeout=120, check=False)
    return done.returncode, {(row["name"], row["status"]): row for row in json.loads(done.stdout)}, done.stderr


@pytest.mark.parametrize(
    ("group", "intended"),
    [
        ("rllm_plugin", "rllm_plugins"),
        ("rllm-plugins", "rllm_plugins"),
        ("RLLM_PLUGINS", "rllm_plugins"),
        ("rlm_plugins", "rllm_plugins"),
        ("rllm_pluigns", "rllm_plugins"),
        ("rllm_plugins.command", "rllm_plugins.commands"),
        ("verl.plugin", "verl.plugins"),
        ("verl_plugins", "verl.plugins"),
    ],
)
def test_a_slip_in_a_group_name_is_a_near_miss_of_the_group_meant(group, intended):
    assert near_miss_group(group) == intended


@pytest.mark.parametrize("group", ["rllm_plugins", "verl.plugins", "rllm_plugins.commands", "console_scripts", "vllm.plugins", "pytest11", "mkdocs.plugins"])
def test_exact_and_unrelated_groups_are_no_near_miss(group):
    assert near_miss_group(group) is None


def test_plugins_lists_an_entry_point_under_a_misspelt_group_as_misplaced(mistakes_env):
    code, rows, _ = plugins_json(mistakes_env)
    assert code == 0
    assert rows[("max_baseline", "misplaced")] == {
        "name": "max_baseline",
        "distribution": "rllm-fixture-misplaced",
        "version": "0.1.0",
        "status": "misplaced",
        "estimators": [],
        "transforms": [],
        "shapers": [],
        "error": MISPLACED,
    }
    verl = rows[("fixture_misplaced", "misplaced")]["error"]
    assert "in the group 'verl.plugin'" in verl
    assert 'rename [project.entry-points."verl.plugin"] to [project.entry-points."verl.plugins"]' in verl


def test_plugins_table_shows_the_misplaced_entry_point_and_its_fix(mistakes_env):
    done = subprocess.run([str(SCRIPT), "plugins"], capture_output=True, text=True, env=mistakes_env, timeout=120, check=False)
    lines = done.stdout.splitlines()
    assert next(line for line in lines if line.startswith("max_baseline")).split() == ["max_baseline", "rllm-fixture-misplaced", "0.1.0", "misplaced", "-"]
    assert f"max_baseline: {MISPLACED}" in lines


def test_looking_up_a_name_offered_under_a_misspelt_group_names_the_group_not_a_lookalike(load_with_mistakes):
    load_with_mistakes()
    with pytest.raises(UnknownEstimatorError) as caught:
        get_estimator("max_baseline")
    assert str(caught.value) == f"estimator 'max_baseline' is not available: {MISPLACED}."


def test_another_unknown_name_mentions_the_misplaced_entry_points_that_may_offer_it(load_with_mistakes):
    load_with_mistakes()
    with pytest.raises(UnknownEstimatorError) as caught:
        get_estimator("best_of_group")
    assert f"Entry points in a misspelt group, never loaded, which may offer it: {MISPLACED}." in str(caught.value)


def test_a_misspelt_module_path_names_the_entry_point_and_the_module_meant(mistakes_env):
    _, rows, stderr = plugins_json(mistakes_env)
    assert rows[("fixture_typo", "error")]["error"] == (
        "ModuleNotFoundError: No module named 'rllm_fixture_typo.plugn'; the entry point fixture_typo = 'rllm_fixture_typo.plugn' "
        "(group rllm_plugins) of distribution rllm-fixture-typo 0.1.0 names the module 'rllm_fixture_typo.plugn', which does not exist. "
        "Did you mean 'rllm_fixture_typo.plugin'? Fix the entry point in the distribution's pyproject.toml, then reinstall it"
    )
    assert "the entry point fixture_typo = 'rllm_fixture_typo.plugn'" in stderr  # the load warning says it too


def test_a_misspelt_attribute_names_the_entry_point_and_the_attribute_meant(mistakes_env):
    _, rows, _ = plugins_json(mistakes_env)
    error = rows[("fixture_typo_attr", "error")]["error"]
    assert error.startswith("AttributeError: ")
    assert error.endswith(
        "; the entry point fixture_typo_attr = 'rllm_fixture_typo.plugin:Hoks' (group rllm_plugins) of distribution rllm-fixture-typo 0.1.0 "
        "names 'Hoks', which the module 'rllm_fixture_typo.plugin' does not define. Did you mean 'Hooks'? "
        "Fix the entry point in the distribution's pyproject.toml, then reinstall it"
    )


def test_a_missing_dependency_of_the_plugin_is_not_blamed_on_the_entry_point(mistakes_env):
    _, rows, _ = plugins_json(mistakes_env)
    assert "the entry point" not in rows[("fixture_broken", "error")]["error"]
