"""Entry-point discovery with real installed distributions: loading, failure policy, conflicts, variables."""

from __future__ import annotations

import importlib
import re
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from rllm_plugins import (
    AdvEstimatorSpec,
    EstimatorConflictError,
    UnknownEstimatorError,
    get_estimator_spec,
    get_rllm_adv_estimator,
    unregister_rllm_adv_estimator,
)
from rllm_plugins.discovery import hookspecs
from rllm_plugins.discovery import manager as plugins
from rllm_plugins.discovery.manager import PluginLoadError, plugin_state, reset_plugins
from rllm_plugins.estimators import BUILTIN_SPECS
from rllm_plugins.registry import get_estimator


def broken_error(site: Path) -> str:
    """The load error of the fixture ``fixture_broken``, at the line of the plugin that failed (its import of a missing module)."""
    return f"ModuleNotFoundError: No module named 'rllm_fixture_missing_dependency' (at {site}/rllm_fixture_broken/__init__.py:3)"


def broken_warning(site: Path) -> str:
    return (
        f"rllm_plugins: skipping plugin 'fixture_broken' (distribution rllm-fixture-broken 0.3.0), which failed to load: {broken_error(site)}. "
        "Fix or uninstall it, or set RLLM_PLUGINS_DISABLE=fixture_broken to silence this."
    )


GRPO_WARNING = "rllm_plugins: plugin 'fixture_grpo_taker' (distribution rllm-fixture-grpo-taker 0.1.0) offers 'grpo', a built-in name; its version is ignored"
CONFLICT_ERROR = (
    "estimator 'shared_baseline' is offered by 2 installed plugins: "
    "plugin 'fixture_dup_a' (distribution rllm-fixture-dup-a 1.0.0); plugin 'fixture_dup_b' (distribution rllm-fixture-dup-b 2.0.0). "
    "Uninstall one, or disable one with RLLM_PLUGINS_DISABLE=<entry-point name> (one of: fixture_dup_a,fixture_dup_b)."
)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"


def records() -> dict[str, tuple[str | None, str | None, str, list[str]]]:
    return {r.name: (r.distribution, r.version, r.status, r.estimators) for r in plugin_state().records}


def test_installed_plugin_estimator_is_selectable_by_name_and_alias(load_plugins):
    load_plugins()
    for name in ("scaled_baseline", "scaled"):
        advantages, _ = get_rllm_adv_estimator(name)(rewards=[np.array([1.0, 2.0, 3.0]), np.array([4.0])])
        np.testing.assert_allclose(advantages[0], [-2.0, 0.0, 2.0])
        np.testing.assert_allclose(advantages[1], [0.0])
    estimator = get_estimator("scaled_baseline")
    assert (estimator.provider.plugin, estimator.provider.distribution, estimator.provider.version) == ("fixture_good", "rllm-fixture-good", "1.2.0")


def test_every_entry_point_is_recorded_with_distribution_version_status_and_estimators(load_plugins):
    load_plugins()
    assert records() == {
        "builtin": ("rllm-plugins", metadata.version("rllm-plugins"), "active", [spec.name for spec in BUILTIN_SPECS]),
        "fixture_broken": ("rllm-fixture-broken", "0.3.0", "error", []),
        "fixture_dup_a": ("rllm-fixture-dup-a", "1.0.0", "conflict", ["shared_baseline"]),
        "fixture_dup_b": ("rllm-fixture-dup-b", "2.0.0", "conflict", ["shared_baseline"]),
        "fixture_good": ("rllm-fixture-good", "1.2.0", "active", ["scaled_baseline"]),
        "fixture_step": ("rllm-fixture-step", "0.3.0", "active", ["last_turn_baseline"]),
        "fixture_stateful": ("rllm-fixture-stateful", "0.2.0", "active", ["running_mean_baseline"]),
        "fixture_grpo_taker": ("rllm-fixture-grpo-taker", "0.1.0", "conflict", ["grpo"]),
        "fixture_legacy": ("rllm-fixture-legacy", "0.5.0", "active", ["legacy_max_baseline"]),
        "fixture_raises": ("rllm-fixture-raises", "0.2.0", "active", ["always_fails"]),
        "fixture_transform": ("rllm-fixture-transform", "0.4.0", "active", []),  # a transform and a shaper, no estimator
        "median_baseline": ("rllm-median-baseline", "0.1.0", "active", ["median_baseline"]),
    }


def test_broken_plugin_warns_once_naming_entry_point_distribution_version_error_and_line(load_plugins, plugin_site):
    warnings = load_plugins()
    assert warnings.count(broken_warning(plugin_site)) == 1
    broken = next(r for r in plugin_state().records if r.name == "fixture_broken")
    assert broken.error == broken_error(plugin_site)
    get_rllm_adv_estimator("scaled_baseline")  # the rest keep working


def test_plugin_cannot_take_a_builtin_name(load_plugins):
    warnings = load_plugins()
    assert GRPO_WARNING in warnings
    assert get_estimator("grpo").provider.kind == "builtin"
    advantages, _ = get_rllm_adv_estimator("grpo")(rewards=[np.array([0.0, 1.0])], norm_adv_by_std_in_grpo=True)
    np.testing.assert_allclose(advantages[0], [-1.0, 1.0], atol=1e-5)  # (r - 0.5) / (0.5 + 1e-6), not the plugin's zeros
    taker = next(r for r in plugin_state().records if r.name == "fixture_grpo_taker")
    assert taker.error == "'grpo' is a built-in estimator name and cannot be taken by a plugin"


def test_two_plugins_offering_one_name_raise_on_lookup_naming_both_and_the_disable_variable(load_plugins):
    load_plugins()
    with pytest.raises(EstimatorConflictError, match=re.escape(CONFLICT_ERROR)):
        get_rllm_adv_estimator("shared_baseline")
    assert "shared_baseline" not in plugin_state().estimators
    assert plugin_state().conflicts["shared_baseline"][1].distribution == "rllm-fixture-dup-b"


def test_a_conflict_leaves_other_names_working(load_plugins):
    load_plugins()
    assert get_estimator_spec("median_baseline").name == "median_baseline"
    assert get_estimator_spec("legacy_max_baseline").name == "legacy_max_baseline"


def test_disable_variable_blocks_entry_points_by_name(load_plugins, plugin_site):
    warnings = load_plugins(RLLM_PLUGINS_DISABLE=" fixture_dup_b , fixture_broken")
    assert broken_warning(plugin_site) not in warnings
    assert records()["fixture_dup_b"] == ("rllm-fixture-dup-b", "2.0.0", "disabled", [])
    assert records()["fixture_broken"] == ("rllm-fixture-broken", "0.3.0", "disabled", [])
    assert records()["fixture_dup_a"][2] == "active"
    advantages, _ = get_rllm_adv_estimator("shared_baseline")(rewards=[np.array([1.0, 3.0])])
    np.testing.assert_allclose(advantages[0], [-1.0, 1.0])
    assert get_estimator("shared_baseline").provider.distribution == "rllm-fixture-dup-a"


def test_strict_mode_raises_on_a_broken_plugin(load_plugins, plugin_site):
    expected = f"plugin 'fixture_broken' (distribution rllm-fixture-broken 0.3.0) failed to load (RLLM_PLUGINS_STRICT is set): {broken_error(plugin_site)}"
    with pytest.raises(PluginLoadError, match=re.escape(expected)) as caught:
        load_plugins(RLLM_PLUGINS_STRICT="1")
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)


def test_strict_mode_loads_when_the_broken_plugin_is_disabled(load_plugins):
    load_plugins(RLLM_PLUGINS_STRICT="1", RLLM_PLUGINS_DISABLE="fixture_broken")
    assert records()["fixture_good"][2] == "active"


def test_decorator_only_module_registers_for_its_plugin(load_plugins):
    load_plugins()
    estimator = get_estimator("legacy_max_baseline")
    assert (estimator.provider.kind, estimator.provider.plugin, estimator.provider.distribution) == ("plugin", "fixture_legacy", "rllm-fixture-legacy")
    with pytest.raises(UnknownEstimatorError):  # not a user-code registration
        unregister_rllm_adv_estimator("legacy_max_baseline")
    advantages, _ = estimator.list_form(rewards=[np.array([1.0, 4.0, 2.0])], norm_adv_by_std_in_grpo=True, episilon=1e-6)
    np.testing.assert_allclose(advantages[0], [-3.0, 0.0, -2.0])


def test_decorator_only_module_imported_before_discovery_still_belongs_to_its_plugin(plugin_site, monkeypatch, load_plugins):
    monkeypatch.syspath_prepend(str(plugin_site))
    reset_plugins()
    importlib.import_module("rllm_fixture_legacy.estimators")  # user code imports it first: registers as user code
    assert plugins._state is None  # the registration did not start discovery from inside a half-imported module
    load_plugins()
    estimator = get_estimator("legacy_max_baseline")
    assert (estimator.provider.kind, estimator.provider.plugin) == ("plugin", "fixture_legacy")
    assert records()["fixture_legacy"][3] == ["legacy_max_baseline"]


def test_exception_inside_a_plugin_estimator_names_the_plugin_and_distribution(load_plugins):
    load_plugins()
    with pytest.raises(ValueError) as caught:
        get_rllm_adv_estimator("always_fails")(rewards=[np.array([1.0])])
    assert str(caught.value) == "always_fails cannot score these rewards"
    assert caught.value.__notes__ == ["raised by estimator 'always_fails' of plugin 'fixture_raises' (distribution rllm-fixture-raises 0.2.0)"]


def test_rllm_adv_estimators_hook_collects_specs_from_every_loaded_plugin(load_plugins):
    load_plugins()
    results = plugin_state().manager.hook.rllm_adv_estimators()
    names = {spec.name for result in results for spec in result}
    assert {"grpo", "rloo", "scaled_baseline", "median_baseline", "always_fails", "shared_baseline"} <= names
    assert all(isinstance(spec, AdvEstimatorSpec) for result in results for spec in result)


def test_every_hook_is_documented_in_its_spec_and_in_the_plugin_guide():
    hooks = [name for name in dir(hookspecs) if name.startswith("rllm_") and hasattr(getattr(hookspecs, name), "rllm_plugins_spec")]
    assert hooks == ["rllm_adv_estimators", "rllm_advantage_transforms", "rllm_reward_shapers"]
    guide = DOCS.read_text()
    for name in hooks:
        assert getattr(hookspecs, name).__doc__
        assert f"### `{name}()`" in guide


def test_a_plugin_offering_only_a_transform_loads_and_its_transform_runs_in_the_collector(load_plugins):
    load_plugins()
    from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
    from rllm_plugins.transforms import get_transform

    assert str(get_transform("recentre").provider) == "plugin 'fixture_transform' (distribution rllm-fixture-transform 0.4.0)"
    groups = [
        TrajectoryGroup([Trajectory(steps=[Step()], reward=r) for r in rewards], group_id=f"q{k}") for k, rewards in enumerate([[1.0, 0.0, 0.0], [2.0, 5.0]])
    ]
    config = AlgorithmConfig(estimator="reinforce", advantage_transforms=[{"name": "recentre", "weight": 0.5}])
    collect_reward_and_advantage_from_trajectory_groups(groups, config)
    # reinforce gives the rewards; recentre subtracts half of each group's mean
    assert [t.steps[0].advantage for t in groups[0].trajectories] == pytest.approx([1.0 - 0.5 / 3, -0.5 / 3, -0.5 / 3])
    assert [t.steps[0].advantage for t in groups[1].trajectories] == pytest.approx([2.0 - 1.75, 5.0 - 1.75])


def test_a_plugins_reward_shaper_is_selectable_by_name_and_shapes_the_rewards_the_estimator_sees(load_plugins):
    load_plugins()
    from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
    from rllm_plugins.shaping import get_reward_shaper

    assert str(get_reward_shaper("brevity").provider) == "plugin 'fixture_transform' (distribution rllm-fixture-transform 0.4.0)"
    lengths, rewards = [[2, 4], [3, 1, 6]], [[1.0, 1.0], [0.0, 1.0, 1.0]]
    groups = [
        TrajectoryGroup([Trajectory(steps=[Step(response_ids=[7] * n)], reward=r) for n, r in zip(ns, rs, strict=True)], group_id=f"q{k}")
        for k, (ns, rs) in enumerate(zip(lengths, rewards, strict=True))
    ]
    config = AlgorithmConfig(estimator="reinforce", reward_shapers=[{"name": "brevity", "weight": 0.5}])
    metrics = collect_reward_and_advantage_from_trajectory_groups(groups, config)
    # reinforce's advantage is the reward the estimator saw: the reward minus half the answer's share of its group's longest
    assert [t.steps[0].advantage for t in groups[0].trajectories] == pytest.approx([1.0 - 0.5 * 2 / 4, 1.0 - 0.5])
    assert [t.steps[0].advantage for t in groups[1].trajectories] == pytest.approx([-0.5 * 3 / 6, 1.0 - 0.5 / 6, 1.0 - 0.5])
    assert metrics["reward/all_groups/mean"] == pytest.approx(0.8)  # the raw rewards, never the shaped ones
    assert metrics["shaping/all_groups/brevity/min"] == pytest.approx(-0.5)
    assert "shapers brevity{\"weight\":0.5} [rllm-fixture-transform 0.4.0]" in metrics.provenance_line


@pytest.mark.parametrize(("typo", "meant"), [("rllm_adv_estimator", "rllm_adv_estimators"), ("rllm_advantage_transform", "rllm_advantage_transforms")])
def test_a_misspelt_hook_is_named_with_the_hook_it_was_meant_to_be(typo, meant):
    import pluggy

    module = type("Plugin", (), {typo: staticmethod(plugins.hookspecs.hookimpl(lambda: []))})()
    manager = pluggy.PluginManager(plugins.hookspecs.PROJECT)
    manager.add_hookspecs(plugins.hookspecs)
    manager.register(module, name="typo")
    with pytest.raises(TypeError, match=rf"its @hookimpl {typo} \(at .*\) is no rllm-plugins hook: the hook is {meant}$"):
        plugins._check_implements_the_hook(manager, module, "typo_module")


def test_discovery_parses_each_distributions_metadata_once(load_plugins, monkeypatch):
    """Distribution.name and .version each parse the metadata file again: discovery reads both from one parse per plugin."""
    parsed: dict[str, int] = {}
    parse = metadata.Distribution.metadata.fget

    def counted(dist: metadata.Distribution) -> object:
        meta = parse(dist)
        parsed[meta["Name"]] = parsed.get(meta["Name"], 0) + 1
        return meta

    monkeypatch.setattr(metadata.Distribution, "metadata", property(counted))
    load_plugins()
    plugins_found = {r.distribution for r in plugin_state().records if r.name != "builtin" and r.status != "error"}  # an error reads more, to name the line
    assert plugins_found <= set(parsed)
    assert {name: parsed[name] for name in plugins_found} == dict.fromkeys(plugins_found, 1)
