"""A TRL run says which code computed its advantages: printed once at the first advantage step, and as ``rllm_provenance``
in the first logs, which ``trainer_state.json`` keeps (real GRPOTrainer steps on the tiny local model)."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import metadata

from rllm_trl.trainer import PROVENANCE_KEY, PROVENANCE_PREFIX

from rllm_plugins.provenance import package_version
from rllm_plugins.registry import get_estimator

PLUGIN = "rllm-median-baseline"  # examples/rllm-median-baseline, installed in the environment


def test_a_run_prints_and_logs_the_plugin_with_its_version_once(make_trainer, tmp_path, capsys):
    version = metadata.version(PLUGIN)
    trainer = make_trainer(adv_estimator="median_baseline", advantage_transforms=[["clip", {"max": 2.0}]], max_steps=2, save_strategy="steps", save_steps=2)
    trainer.train()
    expected = (
        f'median_baseline [{PLUGIN} {version}]; options {{"norm_adv_by_std_in_grpo":true}}; '
        f'transforms clip{{"max":2.0}} [built-in]; rllm-plugins {package_version()}'
    )
    assert trainer.provenance_line() == expected
    printed = [line for line in capsys.readouterr().err.splitlines() if line.startswith(PROVENANCE_PREFIX)]
    assert printed == [PROVENANCE_PREFIX + expected]  # two advantage steps, one line
    logged = [entry for entry in trainer.state.log_history if PROVENANCE_KEY in entry]
    assert [entry[PROVENANCE_KEY] for entry in logged] == [expected] and logged[0]["step"] == 1  # the first logs only
    saved = json.loads((tmp_path / "checkpoint-2" / "trainer_state.json").read_text())
    assert [entry[PROVENANCE_KEY] for entry in saved["log_history"] if PROVENANCE_KEY in entry] == [expected]


def test_a_change_of_settings_is_said_again(make_trainer):
    trainer = make_trainer(adv_estimator="rloo", max_steps=1)
    before = trainer.provenance_line()
    assert before == f'rloo [built-in]; options {{"norm_adv_by_std_in_grpo":true}}; transforms none; rllm-plugins {package_version()}'
    trainer.log({"loss": 0.0})
    trainer.log({"loss": 0.0})
    settings = trainer.advantage_settings
    trainer.advantage_settings = replace(settings, estimator="grpo", selected={**settings.selected, "grpo": get_estimator("grpo")})
    trainer.log({"loss": 0.0})
    after = before.replace("rloo", "grpo")
    assert [entry.get(PROVENANCE_KEY) for entry in trainer.state.log_history] == [before, None, after]
