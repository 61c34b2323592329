"""``verl-check`` and ``verl-rehearse`` say which code will compute the advantages: the line a run prints, in their reports;
their trial runs print nothing of their own."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

pytest.importorskip("verl")

from rllm_verl.context import PROVENANCE_PREFIX
from rllm_verl.tools.check import verl_check
from rllm_verl.tools.rehearse import rehearse

from rllm_plugins.provenance import package_version

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "verl_multi_turn"
AGENT = "actor_rollout_ref.rollout.agent"


def test_verl_check_reports_the_plugin_its_version_the_options_and_the_transforms(capsys):
    report = verl_check(
        [
            "algorithm.adv_estimator=rllm_median_baseline",
            "+algorithm.rllm_advantage_transforms=[{name: clip, max: 2.0}]",
            "algorithm.norm_adv_by_std_in_grpo=false",
        ]
    )
    assert report.ok, report.errors
    line = (
        f'median_baseline [rllm-median-baseline {metadata.version("rllm-median-baseline")}]; options {{"norm_adv_by_std_in_grpo":false}}; '
        f'transforms clip{{"max":2.0}} [built-in]; rllm-plugins {package_version()}'
    )
    assert report.provenance == line
    assert f"  advantages computed by: {line}" in str(report).splitlines()
    assert report.as_dict()["provenance"] == line
    assert PROVENANCE_PREFIX not in capsys.readouterr().out  # the trial runs are quiet


def test_verl_check_of_verls_own_estimator_has_no_line():
    report = verl_check(["algorithm.adv_estimator=grpo"])
    assert report.ok and report.provenance == "" and "advantages computed by" not in str(report)


def test_verl_rehearse_reports_the_line(monkeypatch, capsys):
    monkeypatch.chdir(EXAMPLE)
    overrides = [
        "algorithm.adv_estimator=rllm_gigpo",
        "actor_rollout_ref.rollout.n=2",
        f"{AGENT}.agent_loop_config_path=agent_loops.yaml",
        f"{AGENT}.default_agent_loop=corridor",
    ]
    rehearsal = rehearse(overrides, ["walk the corridor"], ["+", "-"], seed=0)
    line = f'gigpo [built-in]; options {{"norm_adv_by_std_in_grpo":true}}; transforms none; rllm-plugins {package_version()}'
    assert rehearsal.provenance == line
    assert f"advantages computed by: {line}" in str(rehearsal).splitlines()
    assert PROVENANCE_PREFIX not in capsys.readouterr().out
