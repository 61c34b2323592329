"""``rllm_plugins.testing.parametrize_with_checks``: the checks of a plugin's names as pytest items, one per rule."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rllm_plugins.testing import parametrize_with_checks
from rllm_plugins.testing.parametrize import PATHS_ENV
from rllm_plugins.testing.rules import RULES
from rllm_plugins.transforms.contract import transform_rules
from rllm_plugins.transforms.registry import get_transform

BROKEN = '''
import numpy as np

from rllm_plugins import register_advantage_transform, register_rllm_adv_estimator
from rllm_plugins.testing import parametrize_with_checks


@register_rllm_adv_estimator("first_baseline")
def first_baseline(rewards, **kwargs):
    """Reward minus the first reward of its group: breaks permutation equivariance, and nothing else."""
    advantages = [np.asarray(r, dtype=np.float64) - (r[0] if len(r) else 0.0) for r in rewards]
    return advantages, advantages


@register_advantage_transform("in_place")
def in_place(advantages):
    advantages *= 0.5  # changes its input
    return advantages


@parametrize_with_checks(["first_baseline", "in_place"], paths=["core"])
def test_plain(check):
    check()


@parametrize_with_checks(["first_baseline"], paths=False, expected_failures={"first_baseline": {"permutation_equivariant": "the first answer is the baseline"}})
def test_declared(check):
    check()


@parametrize_with_checks(["first_baseline"], paths=False, expected_failures={"first_baseline": {"deterministic": "wrongly declared"}})
def test_wrongly_declared(check):
    check()
'''


def outcomes(tmp_path: Path, source: str) -> tuple[dict[str, str], str]:
    """Run ``source`` as a test file in a fresh pytest; ``{item id: outcome}`` from its ``-rA`` summary, and the output."""
    (tmp_path / "test_subject.py").write_text(textwrap.dedent(source))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLLM_PLUGINS")}
    command = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-W", "ignore::UserWarning", "test_subject.py"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120, check=False)
    found = {item: outcome for outcome, item in re.findall(r"^(PASSED|FAILED|XFAIL|ERROR) test_subject\.py::(\S+)", done.stdout, re.M)}
    return found, done.stdout + done.stderr


@pytest.fixture(scope="module")
def broken_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], str]:
    return outcomes(tmp_path_factory.mktemp("broken"), BROKEN)


def test_a_broken_estimator_fails_the_item_of_its_broken_rule_and_passes_the_others(broken_run):
    found, out = broken_run
    prefix = "test_plain[first_baseline-"
    contract = {item[len(prefix) : -1]: outcome for item, outcome in found.items() if item.startswith(prefix) and "-" not in item[len(prefix) :]}
    assert contract["permutation_equivariant"] == "FAILED", out
    assert {rule for rule, outcome in contract.items() if outcome == "FAILED"} == {"permutation_equivariant"}, out
    assert set(contract) == set(RULES), out  # one item per rule of the contract
    # the message says which rule, what it demands, and the smallest failing example
    assert "estimator 'first_baseline' breaks the rule permutation_equivariant" in out
    assert "minimal failing example" in out


def test_the_core_cells_are_items_too_and_the_broken_relation_fails(broken_run):
    found, out = broken_run
    assert found["test_plain[first_baseline-collector-permutation]"] == "FAILED", out
    assert found["test_plain[first_baseline-list_form-equals_collector]"] == "PASSED", out
    assert "on list_form" in out or "on collector" in out
    assert not [item for item in found if "trl_" in item or "verl" in item], "paths=['core'] collects the core's paths only"


def test_a_broken_transform_fails_its_rule(broken_run):
    found, out = broken_run
    assert found["test_plain[in_place-no_mutation]"] == "FAILED", out
    assert found["test_plain[in_place-shape]"] == "PASSED", out
    assert "advantage transform 'in_place' breaks the rule no mutation" in out


def test_a_declared_expected_failure_is_an_xfail_with_its_reason(broken_run):
    found, out = broken_run
    assert found["test_declared[first_baseline-permutation_equivariant]"] == "XFAIL", out
    assert re.search(r"XFAIL test_subject\.py::test_declared\[first_baseline-permutation_equivariant\] - the first answer is the baseline", out)
    assert found["test_declared[first_baseline-deterministic]"] == "PASSED"


def test_an_expected_failure_that_passes_fails_the_run(broken_run):
    found, out = broken_run
    assert found["test_wrongly_declared[first_baseline-deterministic]"] == "FAILED", out
    assert "[XPASS(strict)] wrongly declared" in out


def test_items_follow_the_spec_level_and_state(load_plugins):
    load_plugins()

    def checks(name: str) -> list:
        return [p.values[0] for p in parametrize_with_checks([name], paths=False).args[1]]

    from rllm_plugins.testing.state_contract import STATE_RULES
    from rllm_plugins.testing.step_contract import STEP_RULES

    assert [c.rule for c in checks("median_baseline")] == list(RULES)
    assert [c.rule for c in checks("running_mean_baseline")] == [*RULES, *STATE_RULES]
    assert [c.rule for c in checks("last_turn_baseline")] == list(STEP_RULES)
    assert [c.rule for c in checks("recentre")] == transform_rules(get_transform("recentre").spec)
    assert [c.id for c in checks("recentre")][:2] == ["recentre-group_sizes_1-8", "recentre-empty_groups"]


def test_a_group_whose_framework_is_missing_is_one_skipped_item(monkeypatch):
    from rllm_plugins.testing.matrix import paths

    monkeypatch.setattr(paths, "path_groups", lambda: ["verl"])
    monkeypatch.setattr(paths, "group_paths", lambda group: "No module named 'verl'")
    params = parametrize_with_checks(["grpo"]).args[1]
    (missing,) = [p.values[0] for p in params if p.values[0].id == "grpo-verl"]
    with pytest.raises(pytest.skip.Exception, match="the verl paths of the conformance matrix are not checked: No module named 'verl'"):
        missing()
    # a cell of a path not collected may still be declared (its relation must be the matrix's)
    parametrize_with_checks(["grpo"], expected_failures={"grpo": {"verl_legacy-permutation": "why"}})


def test_the_environment_variable_selects_the_groups_of_paths(monkeypatch):
    monkeypatch.setenv(PATHS_ENV, "none")
    assert not [p for p in parametrize_with_checks(["grpo"]).args[1] if p.values[0].kind == "paths"]
    monkeypatch.setenv(PATHS_ENV, "core")
    ids = [p.id for p in parametrize_with_checks(["grpo"]).args[1]]
    assert "grpo-collector-permutation" in ids and not [i for i in ids if "verl" in i or "trl" in i]
    monkeypatch.setenv(PATHS_ENV, "core,verll")
    with pytest.raises(ValueError, match=r"RLLM_PLUGINS_CHECK_PATHS=core,verll names no group of paths: verll \(the groups: core, "):
        parametrize_with_checks(["grpo"])


def test_an_expected_failure_naming_no_check_or_no_name_is_refused_at_collection():
    with pytest.raises(ValueError, match=r"expected_failures\['grpo'\] names 'permutation', which is no check of 'grpo' \(its rules: "):
        parametrize_with_checks(["grpo"], paths=False, expected_failures={"grpo": {"permutation": "typo"}})
    with pytest.raises(ValueError, match="expected_failures names 'rloo', which is not among the names checked"):
        parametrize_with_checks(["grpo"], paths=False, expected_failures={"rloo": {"deterministic": "x"}})
    with pytest.raises(ValueError, match="Unknown advantage estimator 'no_such_name'"):
        parametrize_with_checks(["no_such_name"], paths=False)
