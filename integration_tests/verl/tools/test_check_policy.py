"""``rllm-plugins verl-check`` fails when verl would not load our entry point, and on bad estimator options."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")
pytest.importorskip("hydra")

from rllm_verl.tools.check import ENTRY_POINT_NAME, entry_point_policy_error, main, verl_check

NAME_NOTE = "The entry-point name is 'rllm_plugins' (group verl.plugins), not the distribution name 'rllm-plugins'."
FAILS = "so verl will not load the rllm_* estimators and the run fails with 'Unknown advantage estimator'."


def test_the_entry_point_name_is_the_one_in_the_installed_metadata():
    from importlib.metadata import entry_points

    assert {ep.name: ep.value for ep in entry_points(group="verl.plugins")}[ENTRY_POINT_NAME] == "rllm_verl.plugin"


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"VERL_USE_EXTERNAL_PLUGINS": "none"},
            f"VERL_USE_EXTERNAL_PLUGINS=none turns verl's plugin discovery off, {FAILS} "
            f"Fix: unset it, or set VERL_USE_EXTERNAL_PLUGINS=rllm_plugins. {NAME_NOTE}",
        ),
        (
            {"VERL_USE_EXTERNAL_PLUGINS": "other_plugin,rllm-plugins"},
            "VERL_USE_EXTERNAL_PLUGINS='other_plugin,rllm-plugins' lets verl load only the entry points 'other_plugin', 'rllm-plugins', "
            f"{FAILS} Fix: add ours: VERL_USE_EXTERNAL_PLUGINS=other_plugin,rllm-plugins,rllm_plugins (or unset it). {NAME_NOTE}",
        ),
    ],
)
def test_a_policy_that_excludes_our_entry_point_is_explained(environ, message):
    assert entry_point_policy_error(environ) == message


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"VERL_USE_EXTERNAL_PLUGINS": "auto"},
        {"VERL_USE_EXTERNAL_PLUGINS": " Other, RLLM_PLUGINS "},
        {"VERL_USE_EXTERNAL_PLUGINS": "none", "VERL_USE_EXTERNAL_MODULES": "rllm_verl.plugin"},
    ],
)
def test_policies_that_load_us_pass(environ):
    assert entry_point_policy_error(environ) is None


def test_verl_check_fails_under_a_policy_that_excludes_us(monkeypatch, capsys):
    monkeypatch.setenv("VERL_USE_EXTERNAL_PLUGINS", "none")
    assert main(["algorithm.adv_estimator=rllm_grpo"]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "VERL_USE_EXTERNAL_PLUGINS=none turns verl's plugin discovery off" in out
    assert verl_check(["algorithm.adv_estimator=grpo"]).ok  # verl's own estimators do not need us
    monkeypatch.setenv("VERL_USE_EXTERNAL_PLUGINS", "rllm_plugins")
    assert verl_check(["algorithm.adv_estimator=rllm_grpo"]).ok


def test_verl_check_fails_on_a_misspelt_or_mistyped_estimator_option():
    report = verl_check(["algorithm.adv_estimator=rllm_grpo", "+algorithm.rllm_estimator_kwargs.epsilom=0.5"])
    assert not report.ok
    assert "unknown option 'epsilom' for estimator 'grpo' (rllm-plugins (built-in)), which accepts: epsilon. Did you mean 'epsilon'?" in report.errors[0]
    report = verl_check(["algorithm.adv_estimator=rllm_grpo", "+algorithm.rllm_estimator_kwargs.epsilon='1e-4'"])
    assert not report.ok and "option 'epsilon' of estimator 'grpo' must be a number >= 0, got str '1e-4'" in report.errors[0]


MISSING = (
    "no entry point 'rllm_plugins' = 'rllm_verl.plugin' of the verl.plugins group is installed (rllm_verl is importable "
    "without its distribution's metadata, e.g. from a source tree on PYTHONPATH), so verl will not load the rllm_* estimators "
    "and the run fails with 'Unknown advantage estimator'. Fix: install rllm-plugins[verl] (pip install -e . in a checkout), "
    "or set VERL_USE_EXTERNAL_MODULES=rllm_verl.plugin"
)


@pytest.mark.parametrize("policy", ["auto", "AUTO", " auto ", "rllm_plugins", " RLLM_PLUGINS , other"])
def test_without_the_installed_entry_point_the_check_fails_whatever_the_policy_allows(policy):
    # before: OK, because verl-check registers the estimators itself, while verl's run would never load them
    environ = {"VERL_USE_EXTERNAL_PLUGINS": policy}
    assert entry_point_policy_error(environ, installed=[("other", "other.plugin")]) == MISSING
    assert entry_point_policy_error(environ, installed=[(ENTRY_POINT_NAME, "elsewhere.module")]) == MISSING
    assert entry_point_policy_error(environ, installed=[(ENTRY_POINT_NAME, "rllm_verl.plugin")]) is None
    assert entry_point_policy_error(environ) is None  # this environment has it installed
    assert entry_point_policy_error({**environ, "VERL_USE_EXTERNAL_MODULES": "rllm_verl.plugin"}, installed=[]) is None


@pytest.mark.parametrize("policy", ["", " ", ",", "none"])
def test_an_empty_policy_loads_nothing_as_verl_reads_it(policy):
    # verl: os.getenv(...).strip().lower(); "" is not "auto", so its allowed set is empty
    message = entry_point_policy_error({"VERL_USE_EXTERNAL_PLUGINS": policy})
    assert message is not None and FAILS in message
