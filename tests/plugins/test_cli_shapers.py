"""``rllm-plugins shapers`` and ``rllm-plugins check`` for reward shapers: the listing, the contract on the built-ins, on an
installed plugin's shaper (a real wheel), and on shapers that break each rule."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rllm_plugins.cli import main
from rllm_plugins.shaping import register_reward_shaper, unregister_reward_shaper
from rllm_plugins.shaping.builtin import BUILTIN_SHAPERS
from rllm_plugins.shaping.contract import SHAPER_RULES, check_shaper

SCRIPT = Path(sys.executable).parent / "rllm-plugins"
NEEDS = {"dapo_overlong": {"max_length": 100, "buffer": 20}, "turn_penalty": {"coef": 0.1}, "linear_length_penalty": {"max_length": 100}}


def test_shapers_json_lists_the_builtins_and_the_installed_plugins_shaper(cli_env):
    done = subprocess.run([str(SCRIPT), "shapers", "--json"], capture_output=True, text=True, env=cli_env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert set(rows) == {spec.name for spec in BUILTIN_SHAPERS} | {"brevity"}
    assert rows["dapo_overlong"]["options"] == {"max_length": None, "buffer": None, "factor": 1.0}
    assert rows["dapo_overlong"]["context"] == ["lengths"]
    assert rows["brevity"]["provider"] == "plugin 'fixture_transform' (distribution rllm-fixture-transform 0.4.0)"


@pytest.mark.parametrize("spec", BUILTIN_SHAPERS, ids=lambda s: s.name)
def test_every_builtin_passes_its_contract(spec):
    report = check_shaper(spec.name, NEEDS.get(spec.name))
    assert report.ok, str(report)
    assert [rule for rule, _, _ in report.results] == list(SHAPER_RULES)


def test_the_installed_plugins_shaper_passes_check_in_a_subprocess(cli_env):
    done = subprocess.run([str(SCRIPT), "check", "brevity", "--json"], capture_output=True, text=True, env=cli_env, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["ok"] is True


def raises_on_a_group_of_one(rewards, offsets):
    if (np.diff(offsets) == 1).any():
        raise ZeroDivisionError("a group of one")
    return rewards * 0


BROKEN = {
    "raises_on_one": (raises_on_a_group_of_one, "group sizes 1-8"),
    "empty_group_shift": (lambda rewards, offsets: np.repeat(np.arange(offsets.size - 1.0), np.diff(offsets)), "empty groups"),
    "one_short": (lambda rewards: rewards[:-1] * 0, "terms"),
    "infinite": (lambda rewards: np.where(rewards > 0, np.inf, 0.0), "finite"),
    "half": (lambda rewards: np.zeros(rewards.size, dtype=np.float16), "precision"),
    "writes": (lambda rewards: rewards.__imul__(0), "no mutation"),
    "random": (lambda rewards: np.random.default_rng().normal(size=rewards.size), "deterministic"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_shaper_that_breaks_a_rule_fails_that_rule(name, capsys):
    fn, rule = BROKEN[name]
    register_reward_shaper(f"test_broken_{name}")(fn)
    try:
        report = check_shaper(f"test_broken_{name}")
        failed = [r for r, ok, _ in report.results if not ok]
        assert rule in failed, str(report)
        assert main(["check", f"test_broken_{name}"]) == 1
        assert f"FAIL {rule}" in capsys.readouterr().out
    finally:
        unregister_reward_shaper(f"test_broken_{name}")


def test_check_names_a_mistyped_shaper_and_refuses_bad_options(capsys):
    assert main(["check", "dapo_overlog"]) == 1
    assert "Among the reward shapers: did you mean 'dapo_overlong'?" in capsys.readouterr().err
    assert main(["check", "dapo_overlong", "--options", '{"max_length": 10, "buffer": 11}']) == 1
    assert "buffer must be at most max_length (10), got 11" in capsys.readouterr().err
