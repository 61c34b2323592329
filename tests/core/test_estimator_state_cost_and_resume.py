"""The state of stateful estimators: a call costs what its batch costs, a failed call changes nothing, and resumes are loud.

References are written plainly here: prime-rl's loop (each trace against its key's baseline, then the update).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from rllm_plugins import (
    AlgorithmConfig,
    Step,
    Trajectory,
    TrajectoryGroup,
    collect_reward_and_advantage_from_trajectory_groups,
    register_rllm_adv_estimator,
    unregister_rllm_adv_estimator,
)
from rllm_plugins.estimators.rae import SCAN_IN_PYTHON_BELOW, STATE_SCHEMA, rae
from rllm_plugins.provenance import package_version
from rllm_plugins.spec import AdvEstimatorSpec
from rllm_plugins.state.schema import MapOf
from rllm_plugins.state.store import EstimatorState
from rllm_plugins.state.views import updated

VERSION = package_version()


def loop(traces, baselines, decay):
    """prime-rl's loop over ``[(key, reward)]``; ``baselines`` updated in place."""
    out = []
    for key, reward in traces:
        b = baselines.get(key, 0.0)
        out.append(reward - b)
        baselines[key] = decay * b + (1 - decay) * reward
    return out


def group(task, role, rewards):
    return TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1])], reward=float(r)) for r in rewards], group_id=f"{task}:{role}")


def advantages_of(groups):
    return [t.steps[0].advantage for g in groups for t in g.trajectories]


def task_config(decay=0.5, tasks=0):
    config = AlgorithmConfig(estimator="rae", estimator_kwargs={"decay": decay, "key_by": "task"})
    if tasks:
        baselines = {f"t{i}": i / 8.0 for i in range(tasks)}
        config.load_state_dict({"format": 2, "estimators": {"rae": {"solver": {"task_baselines": baselines}}}, "options": {}})
    return config


def test_a_call_updates_the_kept_baselines_in_place_and_touches_only_its_tasks():
    config = task_config(tasks=10_000)
    kept = config.estimator_state._states["rae"]["solver"]["task_baselines"]
    groups = [group("t3", "solver", [1.0, 0.0]), group("t9999", "solver", [1.0]), group("new", "solver", [0.5])]
    collect_reward_and_advantage_from_trajectory_groups(groups, config)
    expected_baselines = {f"t{i}": i / 8.0 for i in range(10_000)}
    expected = loop([("t3", 1.0), ("t3", 0.0), ("t9999", 1.0), ("new", 0.5)], expected_baselines, 0.5)
    assert advantages_of(groups) == expected
    assert config.estimator_state._states["rae"]["solver"]["task_baselines"] is kept  # no copy of the 10,000 tasks
    assert kept == expected_baselines


def test_a_failing_role_after_a_stateful_call_leaves_the_kept_mapping_untouched():
    config = AlgorithmConfig(estimator="rae", estimator_map={"judge": "grpo"}, estimator_kwargs={"key_by": "task"})
    collect_reward_and_advantage_from_trajectory_groups([group("a", "solver", [1.0])], config)
    kept = config.estimator_state._states["rae"]["solver"]["task_baselines"]
    before = dict(kept)
    bad = [group("a", "solver", [0.0]), group("b", "solver", [1.0]), group("q", "judge", [1.0, 0.0])]
    bad[2].trajectories[1].reward = float("nan")
    with pytest.raises(ValueError, match="judge"):
        collect_reward_and_advantage_from_trajectory_groups(bad, config)
    assert kept == before and config.estimator_state._states["rae"]["solver"]["task_baselines"] is kept


def test_an_estimator_changing_its_nested_state_in_place_is_refused_and_nothing_changes():
    @register_rllm_adv_estimator("nested_mutator", stateful=True)
    def nested_mutator(rewards, state, **_):
        counts = state.get("counts", {})
        if "seen" in counts:
            counts["seen"] += 1  # a read-only view: refused
        return ([np.zeros(len(r)) for r in rewards], [np.zeros(len(r)) for r in rewards]), {"counts": {"seen": 1}}

    try:
        config = AlgorithmConfig(estimator="nested_mutator")
        collect_reward_and_advantage_from_trajectory_groups([group("q", "a", [1.0])], config)
        with pytest.raises(ValueError, match=r"'nested_mutator'.*change the state it was given in place"):
            collect_reward_and_advantage_from_trajectory_groups([group("q", "a", [1.0])], config)
        assert config.state_dict()["estimators"] == {"nested_mutator": {"a": {"counts": {"seen": 1}}}}
    finally:
        unregister_rllm_adv_estimator("nested_mutator")


def test_updated_reads_as_the_base_with_the_changes_and_commits_only_them():
    store = EstimatorState()
    store.commit({("e", "r"): {"m": {"a": 1.0, "b": 2.0}}})
    view = store.get("e", "r")["m"]
    new = updated(view, {"b": 3.0, "c": 4.0})
    assert dict(new) == {"a": 1.0, "b": 3.0, "c": 4.0} and len(new) == 3 and "c" in new
    assert dict(view) == {"a": 1.0, "b": 2.0}  # nothing kept changed before the commit
    store.commit({("e", "r"): {"m": new}})
    assert store.state_dict()["estimators"] == {"e": {"r": {"m": {"a": 1.0, "b": 3.0, "c": 4.0}}}}
    with pytest.raises(ValueError, match=r"'m'\]\['d'\] is nan"):
        store.commit({("e", "r"): {"m": updated(store.get("e", "r")["m"], {"d": float("nan")})}})


@pytest.mark.parametrize("n", [5, SCAN_IN_PYTHON_BELOW - 1, SCAN_IN_PYTHON_BELOW, 5_000])
@pytest.mark.parametrize("decay", [0.0, 0.5, 0.95, 0.999])
def test_rae_by_task_equals_the_loop_on_either_side_of_the_python_scan(n, decay):
    rng = np.random.default_rng(n)
    tasks = [f"t{i}" for i in rng.integers(0, max(2, n // 40), n)]
    values = rng.integers(-8, 9, n) / 8.0
    start = {f"t{i}": i / 16.0 for i in range(0, max(2, n // 40), 3)}
    expected_baselines = dict(start)
    expected = loop(list(zip(tasks, values.tolist(), strict=True)), expected_baselines, decay)
    got, new = rae(values, np.arange(n + 1), state={"task_baselines": start}, decay=decay, key_by="task", task_ids=np.array(tasks, dtype=object))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    assert dict(new["task_baselines"]).keys() == expected_baselines.keys()
    np.testing.assert_allclose([new["task_baselines"][k] for k in expected_baselines], list(expected_baselines.values()), rtol=0, atol=1e-12)


def test_one_task_with_many_trajectories_scans_without_overflow():
    values = np.tile([1.0, -1.0, 0.5], 20_000)
    tasks = np.array(["a", "b"] * 30_000, dtype=object)
    got, _ = rae(values, np.arange(values.size + 1), state={}, decay=0.999, key_by="task", task_ids=tasks)
    np.testing.assert_allclose(got, loop(list(zip(tasks.tolist(), values.tolist(), strict=True)), {}, 0.999), rtol=0, atol=1e-9)


def test_the_state_file_records_format_options_and_roles():
    config = AlgorithmConfig(estimator="rae", estimator_kwargs={"decay": 0.5})
    collect_reward_and_advantage_from_trajectory_groups([group("q", "solver", [1.0]), group("q", "judge", [0.0])], config)
    saved = json.loads(json.dumps(config.state_dict()))
    assert saved == {
        "format": 2,
        "estimators": {"rae": {"solver": {"baseline": 0.5}, "judge": {"baseline": 0.0}}},
        "options": {"rae": {"decay": 0.5, "key_by": "role"}},
        "provenance": {"rae": {"source": "built-in", "plugin": "builtin", "distribution": "rllm-plugins", "version": VERSION, "rllm_plugins": VERSION}},
    }


def resumed(saved, **kwargs):
    config = AlgorithmConfig(estimator="rae", estimator_kwargs=kwargs)
    config.load_state_dict(saved)
    return config


@pytest.mark.parametrize(("now", "option", "was"), [({"decay": 0.9}, "decay", "0.5"), ({"decay": 0.5, "key_by": "task"}, "key_by", "'role'")])
def test_resuming_with_other_options_is_refused_naming_the_option_and_both_values(now, option, was):
    config = AlgorithmConfig(estimator="rae", estimator_kwargs={"decay": 0.5})
    collect_reward_and_advantage_from_trajectory_groups([group("q", "solver", [1.0])], config)
    later = resumed(config.state_dict(), **now)
    groups = [group("q", "solver", [1.0])]
    with pytest.raises(ValueError, match=rf"option '{option}' is {now[option]!r} now, but the state .* was made with {option}={was}") as error:
        collect_reward_and_advantage_from_trajectory_groups(groups, later)
    assert "accept_changed_options" in str(error.value)
    assert groups[0].trajectories[0].steps[0].advantage is None and later.state_dict()["estimators"] == config.state_dict()["estimators"]


def test_a_deliberately_accepted_option_change_continues_the_baselines_under_the_new_value():
    config = AlgorithmConfig(estimator="rae", estimator_kwargs={"decay": 0.5})
    collect_reward_and_advantage_from_trajectory_groups([group("q", "solver", [1.0])], config)  # baseline 0.5
    later = AlgorithmConfig(estimator="rae", estimator_kwargs={"decay": 0.9})
    later.load_state_dict(config.state_dict(), accept_changed_options=["decay"])
    groups = [group("q", "solver", [0.0, 1.0])]
    collect_reward_and_advantage_from_trajectory_groups(groups, later)
    assert advantages_of(groups) == loop([("s", 0.0), ("s", 1.0)], {"s": 0.5}, 0.9)
    assert later.state_dict()["options"] == {"rae": {"decay": 0.9, "key_by": "role"}}


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"baseline": None}, r"key 'baseline': expected a finite float, got NoneType None"),
        ({"baseline": "abc"}, r"key 'baseline': expected a finite float, got str 'abc'"),
        ({"baseline": [1.0]}, r"key 'baseline': expected a finite float, got list"),
        ({"task_baselines": [0.5]}, r"key 'task_baselines': expected a mapping of str to a finite float, got list"),
        ({"task_baselines": {"t": True}}, r"key 'task_baselines'\['t'\]: expected a finite float, got bool"),
        ({"basline": 0.5}, r"holds the key 'basline', which this estimator's state does not have \(its keys: \['baseline', 'task_baselines'\]\)"),
    ],
)
def test_a_loaded_state_of_another_layout_is_refused_naming_estimator_role_and_key(state, message):
    saved = {"format": 2, "estimators": {"rae": {"solver": state}}, "options": {}}
    with pytest.raises(ValueError, match=rf"estimator 'rae', role 'solver'.*{message}"):
        EstimatorState().load_state_dict(saved, schemas={"rae": STATE_SCHEMA})
    config = resumed(saved)  # the core's config cannot see the registry: checked at the first call, before rae runs
    groups = [group("q", "solver", [1.0])]
    with pytest.raises(ValueError, match=rf"estimator 'rae', role 'solver'.*{message}"):
        collect_reward_and_advantage_from_trajectory_groups(groups, config)
    assert groups[0].trajectories[0].steps[0].advantage is None


def test_a_task_state_under_key_by_role_is_refused_not_ignored():
    saved = {"format": 1, "estimators": {"rae": {"solver": {"task_baselines": {"q": 0.5}}}}}  # format 1: no options recorded
    config = resumed(saved)
    with pytest.raises(ValueError, match=r"key_by='role' keeps 'baseline', but the state holds 'task_baselines' \(made with key_by='task'\)"):
        collect_reward_and_advantage_from_trajectory_groups([group("q", "solver", [1.0])], config)
    assert config.state_dict()["estimators"] == saved["estimators"]


def test_a_format_1_file_still_loads_and_continues():
    config = resumed({"format": 1, "estimators": {"rae": {"solver": {"baseline": 0.5}}}}, decay=0.5)
    groups = [group("q", "solver", [1.0])]
    collect_reward_and_advantage_from_trajectory_groups(groups, config)
    assert advantages_of(groups) == [0.5]


def test_a_state_schema_needs_a_stateful_spec_and_known_kinds():
    def fn(values, offsets, /, *, state):
        return values, {}

    with pytest.raises(ValueError, match="state_schema needs stateful=True"):
        AdvEstimatorSpec("schema_only", batched=lambda values, offsets: values, state_schema={"b": float})
    with pytest.raises(ValueError, match=r"state_schema\['b'\] is <class 'list'>"):
        AdvEstimatorSpec("bad_kind", batched=fn, stateful=True, state_schema={"b": list})
    assert AdvEstimatorSpec("good", batched=fn, stateful=True, state_schema={"b": MapOf(int)}).state_schema == {"b": MapOf(int)}


def test_a_preview_reads_the_state_and_commits_nothing():
    store = EstimatorState()
    store.commit({("rae", "a"): {"baseline": 0.5}})
    preview = store.preview()
    assert dict(preview.get("rae", "a")) == {"baseline": 0.5}
    preview.commit({("rae", "a"): {"baseline": 0.7}})
    assert store.state_dict()["estimators"] == {"rae": {"a": {"baseline": 0.5}}}


def test_the_contract_checker_flags_an_estimator_that_changes_nested_state_in_place():
    from rllm_plugins.testing import check_estimator

    def nested_counter(values, offsets, /, *, state, **_):
        counts = state.get("counts", {"calls": 0})
        if isinstance(counts, dict):
            counts = dict(counts)
        counts["calls"] = counts["calls"] + 1  # a copy from a plain caller, a read-only view from an owner
        return np.zeros_like(values), {"counts": counts}

    report = check_estimator(AdvEstimatorSpec("nested_counter", batched=nested_counter, stateful=True, options=()))
    assert report.verdicts["state_as_owners_give_it"] == "FAIL"
    assert "change the state it was given in place" in str(report)
    assert check_estimator("rae").verdicts["state_as_owners_give_it"] == "pass"


@pytest.mark.parametrize(
    ("bad_key", "bad_value", "message"),
    [("t7", float("nan"), r"\['t7'\] is nan"), (7, 0.5, "has the key 7"), ("t7", True, r"\['t7'\]: expected a finite float, got bool")],
)
def test_a_large_loaded_mapping_is_checked_value_by_value_where_it_fails(bad_key, bad_value, message):
    baselines = {f"t{i}": i / 8.0 for i in range(10_000)}
    baselines[bad_key] = bad_value
    saved = {"format": 2, "estimators": {"rae": {"solver": {"task_baselines": baselines}}}, "options": {}}
    with pytest.raises(ValueError, match=message):
        EstimatorState().load_state_dict(saved, schemas={"rae": STATE_SCHEMA})


def test_appending_to_a_kept_list_is_refused_as_a_change_in_place():
    @register_rllm_adv_estimator("list_appender", stateful=True)
    def list_appender(rewards, state, **_):
        log = state.get("log", [])
        log.append(len(rewards))  # a read-only view once kept
        return ([np.zeros(len(r)) for r in rewards], [np.zeros(len(r)) for r in rewards]), {"log": list(log)}

    try:
        config = AlgorithmConfig(estimator="list_appender")
        collect_reward_and_advantage_from_trajectory_groups([group("q", "a", [1.0])], config)
        with pytest.raises(ValueError, match=r"'list_appender'.*change the state it was given in place"):
            collect_reward_and_advantage_from_trajectory_groups([group("q", "a", [1.0])], config)
        assert config.state_dict()["estimators"] == {"list_appender": {"a": {"log": [1]}}}
    finally:
        unregister_rllm_adv_estimator("list_appender")
