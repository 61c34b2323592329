"""``rllm-plugins plugins --strict`` and ``rllm-plugins check --json``: the commands a CI job runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rllm_plugins.discovery.manager import DISABLE_ENV, STRICT_ENV
from rllm_plugins.testing import RULES

SCRIPT = Path(sys.executable).parent / "rllm-plugins"


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=120, check=False)


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in (STRICT_ENV, DISABLE_ENV, "PYTHONPATH")}


def test_plugins_exits_0_without_strict_whatever_the_plugins_state(cli_env):
    assert run(cli_env, "plugins").returncode == 0


def test_plugins_strict_fails_naming_every_plugin_in_error_or_conflict(cli_env):
    done = run(cli_env, "plugins", "--strict")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "rllm-plugins plugins --strict: 4 plugin(s) not usable: fixture_broken (error), fixture_dup_a (conflict), "
        "fixture_dup_b (conflict), fixture_grpo_taker (conflict)"
    )
    assert "fixture_good" in done.stdout  # the table is still printed


def test_plugins_strict_passes_when_every_plugin_is_active_or_disabled(cli_env):
    env = {**cli_env, DISABLE_ENV: "fixture_broken,fixture_dup_b,fixture_grpo_taker"}
    done = run(env, "plugins", "--strict", "--json")
    assert done.returncode == 0, done.stderr
    assert {row["status"] for row in json.loads(done.stdout)} == {"active", "disabled"}


def test_plugins_strict_fails_on_an_entry_point_in_a_misspelt_group(cli_env, mistakes_site):
    env = {**clean_env(), "PYTHONPATH": str(mistakes_site), DISABLE_ENV: "fixture_typo,fixture_typo_attr,fixture_flat"}
    done = run(env, "plugins", "--strict")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == "rllm-plugins plugins --strict: 2 plugin(s) not usable: fixture_misplaced (misplaced), max_baseline (misplaced)"


def test_plugins_strict_passes_on_the_installed_packages():
    done = run(clean_env(), "plugins", "--strict")
    assert done.returncode == 0, done.stderr


def test_check_json_gives_every_rule_and_the_verdict():
    done = run(clean_env(), "check", "grpo", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["estimator"], report["ok"], report["violations"]) == ("'grpo' (rllm-plugins (built-in))", True, [])
    assert [rule["rule"] for rule in report["rules"]] == list(RULES)
    assert {rule["status"] for rule in report["rules"]} == {"pass"}


def test_check_json_of_a_failing_estimator_gives_the_violations_and_exit_1(cli_env):
    done = run(cli_env, "check", "always_fails", "--json")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["ok"] is False
    assert report["violations"][0]["rule"] in RULES
    assert "always_fails cannot score these rewards" in report["violations"][0]["message"]
    assert any(rule["status"] == "FAIL" for rule in report["rules"])
