"""``verl-check`` tries realistic group sizes: an installed plugin that returns one flat list fails even with ``rollout.n=1``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytest.importorskip("hydra")

SCRIPT = Path(sys.executable).parent / "rllm-plugins"


def verl_check(env: dict[str, str], *overrides: str) -> tuple[int, dict]:
    done = subprocess.run([str(SCRIPT), "verl-check", "--json", *overrides], capture_output=True, text=True, env=env, timeout=300, check=False)
    return done.returncode, json.loads(done.stdout)


def test_a_plugin_returning_one_flat_list_fails_the_check_with_groups_of_one_configured(cli_env, mistakes_site):
    env = {**cli_env, "PYTHONPATH": str(mistakes_site)}
    code, report = verl_check(env, "algorithm.adv_estimator=rllm_flat_baseline", "actor_rollout_ref.rollout.n=1")
    assert code == 1
    assert report["provider"] == "estimator 'flat_baseline' of plugin 'fixture_flat' (distribution rllm-fixture-flat 0.1.0)"
    assert report["trial_group_sizes"] == [1, 2]  # groups of one pass; the first larger size shows the mistake
    trial = "'rllm_flat_baseline' fails on a toy batch of two groups of 2 with this config on verl's v1 trainer (trainer.use_v1=true)"
    assert report["errors"][0].startswith(f"{trial}: ValueError: ")


def test_the_same_plugin_is_flagged_by_the_contract_check(cli_env, mistakes_site):
    env = {**cli_env, "PYTHONPATH": str(mistakes_site)}
    done = subprocess.run([str(SCRIPT), "check", "flat_baseline", "--json"], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 1
    assert not json.loads(done.stdout)["ok"]


def test_an_unknown_name_names_the_entry_points_under_misspelt_groups(cli_env, mistakes_site):
    env = {**cli_env, "PYTHONPATH": str(mistakes_site)}
    code, report = verl_check(env, "algorithm.adv_estimator=rllm_max_baseline")
    assert code == 1
    error = report["errors"][0]
    assert "declares the entry point max_baseline = 'rllm_fixture_misplaced' in the group 'rllm_plugin'" in error
    assert "declares the entry point fixture_misplaced = 'rllm_fixture_misplaced' in the group 'verl.plugin'" in error
