"""Fail fast: verl's own ``ppo_trainer`` Hydra config with an ``rllm_*`` estimator is checked before launch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rllm_plugins

pytest.importorskip("verl")
pytest.importorskip("hydra")

from rllm_verl.tools.check import main, verl_check


def test_rllm_rloo_in_verls_ppo_trainer_config_passes():
    report = verl_check(["algorithm.adv_estimator=rllm_rloo"])
    assert report.ok, report
    assert report.adv_estimator == "rllm_rloo"
    assert {"rllm_rloo", "rllm_grpo", "rllm_median_baseline"} <= set(report.rllm_names)


def test_a_misspelt_name_fails_with_the_closest_name_and_the_list(capsys):
    assert main(["algorithm.adv_estimator=rllm_rlo", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["ok"]
    assert "unknown advantage estimator 'rllm_rlo'. Did you mean 'rllm_rloo'?" in report["errors"][0]
    assert "rllm_grpo" in report["errors"][0] and "rllm_grpo" in report["rllm_names"]


def test_estimator_options_from_the_command_line_are_tried_on_a_toy_batch():
    good = verl_check(["algorithm.adv_estimator=rllm_grpo", "+algorithm.rllm_estimator_kwargs.epsilon=1e-4", "algorithm.norm_adv_by_std_in_grpo=false"])
    assert good.ok, good
    bad = verl_check(["algorithm.adv_estimator=rllm_grpo", "+algorithm.rllm_estimator_kwargs=7"])
    assert not bad.ok and "rllm_estimator_kwargs must be a mapping" in bad.errors[0]


def test_verls_own_names_pass_and_bad_overrides_are_reported():
    assert verl_check(["algorithm.adv_estimator=grpo"]).ok
    report = verl_check(["algorithm.no_such_key=1"])
    assert not report.ok and "Hydra could not compose the config" in report.errors[0]


def run_cli(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)


def test_rllm_plugins_verl_check_is_the_command_the_verl_adapter_contributes():
    done = subprocess.run(
        [str(Path(sys.executable).parent / "rllm-plugins"), "verl-check", "algorithm.adv_estimator=rllm_rloo", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["adv_estimator"] == "rllm_rloo"


def test_rllm_plugins_verl_check_without_verl_says_what_to_install():
    code = "import sys; sys.modules['verl'] = None\nfrom rllm_plugins.cli import main\nsys.exit(main(['verl-check', 'algorithm.adv_estimator=rllm_rloo']))"
    done = run_cli(code)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"rllm-plugins verl-check: cannot load the command from rllm-plugins {rllm_plugins.__version__} (rllm_verl.tools.check:main): "
        'ModuleNotFoundError: rllm_verl needs verl and torch, and verl is not installed. Install: pip install "rllm-plugins[verl]"\n'
    )


def test_the_report_says_whether_each_extension_is_active(capsys):
    assert main(["algorithm.adv_estimator=rllm_rloo"]) == 0
    out = capsys.readouterr().out
    assert "session extension (rllm_* over v1 multi-output sessions): active" in out
    assert "reward-key extension (algorithm.gdpo_reward_keys for rllm_* in ray_trainer.compute_advantage): active" in out


def test_the_report_names_an_opted_out_extension():
    code = "import json\nfrom rllm_verl.tools.check import verl_check\nprint(json.dumps(verl_check(['algorithm.adv_estimator=rllm_rloo']).as_dict()))"
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "RLLM_PLUGINS_VERL_REWARD_KEYS": "0"}, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert (report["session_extension"], report["reward_key_extension"]) == ("active", "off (RLLM_PLUGINS_VERL_REWARD_KEYS=0)")


def test_reward_key_options_are_tried_on_a_toy_batch_with_those_keys():
    keys, legacy = "+algorithm.gdpo_reward_keys=[accuracy,format]", "trainer.use_v1=false"
    good = verl_check(["algorithm.adv_estimator=rllm_rloo", keys, "+algorithm.gdpo_reward_weights=[1.0,0.5]", legacy])
    assert good.ok, good
    bad = verl_check(["algorithm.adv_estimator=rllm_rloo", "+algorithm.gdpo_reward_keys=[accuracy,format]", "+algorithm.gdpo_reward_weights=[1.0]"])
    assert not bad.ok and "gdpo_reward_weights has 1 weights for the 2 keys" in bad.errors[0]


def test_passk_training_k_is_checked_against_the_rollout_group_size():
    good = verl_check(["algorithm.adv_estimator=rllm_passk_training", "+algorithm.rllm_estimator_kwargs.k=4", "actor_rollout_ref.rollout.n=8"])
    assert good.ok, good
    same = verl_check(["algorithm.adv_estimator=rllm_passk_training", "+algorithm.rllm_estimator_kwargs.k=8", "actor_rollout_ref.rollout.n=8"])
    assert not same.ok and "'rllm_passk_training' with actor_rollout_ref.rollout.n=8: estimator 'passk_training': k=8 equals the group size" in same.errors[0]
    larger = verl_check(["algorithm.adv_estimator=rllm_passk_training", "+algorithm.rllm_estimator_kwargs.k=9", "actor_rollout_ref.rollout.n=8"])
    assert not larger.ok and "k=9 is larger than the group size 8" in larger.errors[0]


def test_reward_keys_on_verls_default_v1_trainer_pass_the_check_through_the_v1_path_and_fail_with_the_extension_off():
    """The trial runs compute_advantage_for_multi_trajectories in a v1 step whose rows carry the scores in extra_fields."""
    report = verl_check(["algorithm.adv_estimator=rllm_grpo", "+algorithm.gdpo_reward_keys=[acc,fmt]"])
    assert report.ok, report
    assert verl_check(["algorithm.adv_estimator=rllm_grpo", "+algorithm.gdpo_reward_keys=[acc,fmt]", "trainer.use_v1=false"]).ok
    code = (
        "import json; from rllm_verl.tools.check import verl_check; "
        "r = verl_check(['algorithm.adv_estimator=rllm_grpo', '+algorithm.gdpo_reward_keys=[acc,fmt]']); print(json.dumps(r.as_dict()))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "RLLM_PLUGINS_VERL_V1_BATCH": "0"}, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    off = json.loads(done.stdout.strip().splitlines()[-1])
    assert not off["ok"] and off["v1_batch_extension"] == "off (RLLM_PLUGINS_VERL_V1_BATCH=0)"
    assert "on verl's v1 trainer (trainer.use_v1=true)" in off["errors"][0] and "unset RLLM_PLUGINS_VERL_V1_BATCH" in off["errors"][0]


def test_advantage_transforms_are_checked_before_launch_for_any_estimator():
    ok = verl_check(["algorithm.adv_estimator=grpo", "+algorithm.rllm_advantage_transforms=[{name:clip,max:2.0},{name:scale,negative:0.5}]"])
    assert ok.ok, ok.errors
    bad = verl_check(["algorithm.adv_estimator=gae", "+algorithm.rllm_advantage_transforms=[{name:clip,maximum:2.0}]"])
    assert not bad.ok
    assert bad.errors == [
        "algorithm.rllm_advantage_transforms[0]: advantage transform 'clip' (rllm-plugins (built-in)) has no option(s) ['maximum']; its options: min, max"
    ]


def test_advantage_transforms_with_the_extension_that_runs_them_off_fail_before_launch(monkeypatch):
    from rllm_verl.extension import install
    from rllm_verl.patches.legacy import REWARD_KEYS

    monkeypatch.setenv("RLLM_PLUGINS_VERL_REWARD_KEYS", "0")
    try:
        report = verl_check(["algorithm.adv_estimator=grpo", "+algorithm.rllm_advantage_transforms=[{name:clip,max:1.0}]"])
    finally:
        monkeypatch.delenv("RLLM_PLUGINS_VERL_REWARD_KEYS")
        install(REWARD_KEYS)
    assert not report.ok
    assert report.errors == [
        "algorithm.rllm_advantage_transforms is set, but the extension of ray_trainer.compute_advantage that runs them is "
        "off (RLLM_PLUGINS_VERL_REWARD_KEYS=0); unset RLLM_PLUGINS_VERL_REWARD_KEYS or drop the transforms"
    ]
