"""What ``verl-check`` reports: who provides the estimator, the group sizes tried, the verdict first, and nothing misleading."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytest.importorskip("hydra")

from rllm_verl.tools.check import TRIAL_GROUP_SIZES, verl_check

SCRIPT = Path(sys.executable).parent / "rllm-plugins"


def verl_check_command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), "verl-check", *args], capture_output=True, text=True, timeout=300, env=env, check=False)


def test_verls_own_estimator_is_named_as_verls_with_ours_next_to_it():
    report = verl_check(["algorithm.adv_estimator=rloo"])
    assert report.ok, report
    assert report.provider == (
        "verl's own estimator (verl.trainer.ppo.core_algos.compute_rloo_outcome_advantage), not rllm-plugins'; rllm-plugins' rloo is 'rllm_rloo'"
    )
    assert report.trial_group_sizes == []  # verl's own estimators are verl's to test


def test_an_rllm_estimator_names_its_provider():
    report = verl_check(["algorithm.adv_estimator=rllm_median_baseline"])
    assert report.ok, report
    assert report.provider == "estimator 'median_baseline' of plugin 'median_baseline' (distribution rllm-median-baseline 0.1.0)"


def test_the_trial_run_tries_several_group_sizes_whatever_rollout_n_says():
    report = verl_check(["algorithm.adv_estimator=rllm_rloo", "actor_rollout_ref.rollout.n=1"])
    assert report.ok, report
    assert report.trial_group_sizes == sorted(TRIAL_GROUP_SIZES) and 1 in report.trial_group_sizes and max(report.trial_group_sizes) > 2
    assert "  trial run: two groups of each size 1, 2, 3, 4, 8 (actor_rollout_ref.rollout.n=1)" in str(report).splitlines()


def test_the_trial_run_adds_rollout_n_and_leaves_out_sizes_the_options_rule_out():
    report = verl_check(["algorithm.adv_estimator=rllm_passk_training", "+algorithm.rllm_estimator_kwargs.k=4", "actor_rollout_ref.rollout.n=6"])
    assert report.ok, report
    assert report.trial_group_sizes == [6, 8]
    assert report.trial_note == " (actor_rollout_ref.rollout.n=6; not 1, 2, 3, 4: the estimator's options rule those sizes out)"


def test_a_config_that_cannot_be_composed_is_headed_with_the_estimator_the_overrides_set():
    report = verl_check(["algorithm.adv_estimator=rllm_rloo", "algorithm.no_such_key=1"])
    assert not report.ok
    assert str(report).splitlines()[0] == "verl config 'ppo_trainer': algorithm.adv_estimator='rllm_rloo': FAILED"


def test_with_verls_plugin_discovery_off_no_rllm_name_is_listed_as_known_to_verl():
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "none"}
    done = verl_check_command("algorithm.adv_estimator=rllm_rloo", env=env)
    assert done.returncode == 1
    assert "VERL_USE_EXTERNAL_PLUGINS=none turns verl's plugin discovery off" in done.stdout
    assert "  rllm_* estimators in verl: (none)" in done.stdout.splitlines()


def test_the_verdict_comes_first_and_verls_import_messages_are_held_back():
    done = verl_check_command("algorithm.adv_estimator=rllm_rloo")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "verl config 'ppo_trainer': algorithm.adv_estimator='rllm_rloo': OK"
    assert "UserWarning" not in done.stdout + done.stderr
    verbose = verl_check_command("algorithm.adv_estimator=rllm_rloo", "--verbose")
    assert verbose.stdout == done.stdout
    held = done.stderr.strip().splitlines()
    if held:  # verl printed something while being imported: one line says so, --verbose shows it
        shown = len(verbose.stderr.strip().splitlines()) - 1  # below one heading line
        assert held == [f"({shown} lines printed by verl and its imports during the check are held back; --verbose shows them)"]


def test_help_imports_neither_verl_nor_torch():
    code = (
        "import sys\nfrom rllm_verl.tools.check import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted({'verl', 'torch'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.splitlines()[-1] == "[]", done.stderr
    assert "trial run on toy groups of several sizes" in " ".join(done.stdout.split())
