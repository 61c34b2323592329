"""A name that is unknown because its plugin failed to load or is disabled says so, on every path that looks names up.

The core lookup, ``rllm-plugins check``, TRL's config, verl's registry and ``verl-check`` name
the plugin, its distribution and its load error (with the plugin's file and line).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from rllm_plugins.cli import main
from rllm_plugins.discovery.manager import plugin_state, reset_plugins
from rllm_plugins.registry import UnknownEstimatorError, get_estimator
from rllm_plugins.transforms import UnknownTransformError, get_transform


def broken_because(site: Path) -> str:
    return (
        "plugin 'fixture_broken' (distribution rllm-fixture-broken 0.3.0) failed to load: "
        f"ModuleNotFoundError: No module named 'rllm_fixture_missing_dependency' (at {site}/rllm_fixture_broken/__init__.py:3)"
    )


def namesake_message(site: Path) -> str:
    return f"estimator 'fixture_broken' is not available: {broken_because(site)}. Fix or uninstall it (`rllm-plugins plugins` shows every plugin's status)."


def test_the_name_of_a_plugin_that_failed_to_load_names_the_plugin_its_distribution_and_error(load_plugins, plugin_site):
    load_plugins()
    with pytest.raises(UnknownEstimatorError) as caught:
        get_estimator("fixture_broken")
    assert str(caught.value) == namesake_message(plugin_site)


def test_the_name_of_a_disabled_plugin_says_it_is_disabled_and_how_to_enable_it(load_plugins):
    load_plugins(RLLM_PLUGINS_DISABLE="fixture_good")
    with pytest.raises(UnknownEstimatorError) as caught:
        get_estimator("fixture_good")
    assert str(caught.value) == (
        "estimator 'fixture_good' is not available: plugin 'fixture_good' (distribution rllm-fixture-good 1.2.0) is disabled by "
        "RLLM_PLUGINS_DISABLE. Remove 'fixture_good' from RLLM_PLUGINS_DISABLE to use it (`rllm-plugins plugins` shows every plugin's status)."
    )


def test_another_unknown_name_lists_the_plugins_that_did_not_load_and_no_far_fetched_guess(load_plugins, plugin_site):
    load_plugins(RLLM_PLUGINS_DISABLE="fixture_good")
    with pytest.raises(UnknownEstimatorError) as caught:
        get_estimator("scaled_baseline")  # offered by the disabled fixture_good; 'median_baseline' is no typo of it
    message = str(caught.value)
    assert message.startswith(
        "Unknown advantage estimator 'scaled_baseline'. Plugins that did not load, which may offer it: "
        f"{broken_because(plugin_site)}; plugin 'fixture_good' (distribution rllm-fixture-good 1.2.0) is disabled by RLLM_PLUGINS_DISABLE. "
        "Available: "
    )
    assert "Did you mean" not in message


def test_a_transform_name_says_the_same_of_a_plugin_that_did_not_load(load_plugins, plugin_site):
    """The transform lookup words a missing name as the estimator lookup does (one function writes both)."""
    load_plugins(RLLM_PLUGINS_DISABLE="fixture_good")
    with pytest.raises(UnknownTransformError) as caught:
        get_transform("fixture_broken")
    assert str(caught.value) == namesake_message(plugin_site).replace("estimator 'fixture_broken'", "advantage transform 'fixture_broken'", 1)
    with pytest.raises(UnknownTransformError) as caught:
        get_transform("no_such_transform")
    assert str(caught.value).startswith(
        "Unknown advantage transform 'no_such_transform'. Plugins that did not load, which may offer it: "
        f"{broken_because(plugin_site)}; plugin 'fixture_good' (distribution rllm-fixture-good 1.2.0) is disabled by RLLM_PLUGINS_DISABLE. "
        "Available: "
    )


def test_plugins_disabled_on_purpose_leave_the_usual_typo_hints(load_plugins):
    """Only a plugin that failed to load narrows the hints to near-typos: disabling one (as its warning advises) does not."""
    load_plugins(RLLM_PLUGINS_DISABLE="fixture_broken")
    with pytest.raises(UnknownTransformError, match=re.escape("Did you mean 'scale'?")):
        get_transform("sclae")
    load_plugins()  # fixture_broken fails to load: 'sclae' is no near-typo of 'scale'
    with pytest.raises(UnknownTransformError) as caught:
        get_transform("sclae")
    assert "Did you mean" not in str(caught.value)


def test_a_near_typo_is_still_suggested_when_a_plugin_did_not_load(load_plugins):
    load_plugins()
    with pytest.raises(UnknownEstimatorError, match=re.escape("Did you mean 'median_baseline'?")):
        get_estimator("median_baselin")


def test_an_unknown_name_says_nothing_about_plugins_when_every_plugin_loaded():
    reset_plugins()  # the installed plugins only (no fixtures): all of them load
    try:
        assert all(r.status == "active" for r in plugin_state().records)
        with pytest.raises(UnknownEstimatorError) as caught:
            get_estimator("no_such_estimator")
        assert str(caught.value).startswith("Unknown advantage estimator 'no_such_estimator'. Available: ")
    finally:
        reset_plugins()


def test_cli_check_of_a_failed_plugins_name_says_why(load_plugins, plugin_site, capsys):
    load_plugins()
    assert main(["check", "fixture_broken"]) == 1
    assert capsys.readouterr().err == f"rllm-plugins check: {namesake_message(plugin_site)}\n"


def test_trl_config_says_why(load_plugins, plugin_site):
    pytest.importorskip("trl")
    from rllm_trl import RLLMGRPOConfig

    load_plugins()
    with pytest.raises(UnknownEstimatorError) as caught:
        RLLMGRPOConfig(output_dir="unused", adv_estimator="fixture_broken", use_cpu=True, report_to="none")
    assert str(caught.value) == f"adv_estimator: {namesake_message(plugin_site)}"


VERL_SCRIPT = """
import sys, warnings
warnings.simplefilter("ignore")
import numpy as np, torch
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from rllm_verl.tools.check import verl_check
try:
    get_adv_estimator_fn("rllm_fixture_broken")(
        token_level_rewards=torch.ones(2, 3), response_mask=torch.ones(2, 3), index=np.array(["a", "a"], dtype=object), config=None
    )
except ValueError as error:
    print("verl:", error)
for name in ("rllm_fixture_broken", "rllm_scaled_baseline", "rllm_shared_baseline"):
    print("verl-check:", verl_check(["algorithm.adv_estimator=" + name]).errors[0])
"""


def test_verls_registry_and_verl_check_say_why_a_name_is_unavailable_or_in_conflict(cli_env, plugin_site):
    pytest.importorskip("verl")
    env = {**cli_env, "RLLM_PLUGINS_DISABLE": "fixture_good"}
    done = subprocess.run([sys.executable, "-c", VERL_SCRIPT], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith(("verl:", "verl-check:"))]
    assert lines[0] == f"verl: {namesake_message(plugin_site)}"
    assert lines[1] == f"verl-check: 'rllm_fixture_broken' is registered in verl but cannot run: {namesake_message(plugin_site)}"
    assert lines[2].startswith(
        "verl-check: unknown advantage estimator 'rllm_scaled_baseline'. Plugins that did not load, which may offer it: "
        f"{broken_because(plugin_site)}; plugin 'fixture_good' (distribution rllm-fixture-good 1.2.0) is disabled by RLLM_PLUGINS_DISABLE. "
    )
    assert " verl knows: " in lines[2]
    assert lines[3].startswith(
        "verl-check: 'rllm_shared_baseline' is registered in verl but cannot run: estimator 'shared_baseline' is offered by 2 installed plugins: "
    )
