"""docs/running_baselines.md says what the code does: its worked example, its snippets and its numbers are computed here."""

from __future__ import annotations

import contextlib
import inspect
import io
import re
from pathlib import Path

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.estimators.rae import rae
from rllm_plugins.registry import register_rllm_adv_estimator, unregister_rllm_adv_estimator
from rllm_plugins.testing import check_estimator

DOC = (Path(__file__).resolve().parents[2] / "docs" / "running_baselines.md").read_text()


def section(title: str) -> str:
    return DOC.split(title, 1)[1].split("\n#", 1)[0]


def python_block(title: str) -> str:
    return section(title).split("```python\n", 1)[1].split("```", 1)[0]


def test_the_worked_example_table_is_what_two_collector_calls_compute():
    rows = re.findall(r"^\| (\d) \| (\S+) \| (\w+) \| (-?[\d.]+) \| (-?[\d.]+) \| (-?[\d.]+) \| (-?[\d.]+) \|$", section("### The worked example"), re.M)
    assert len(rows) == 6
    config = AlgorithmConfig(estimator="rae", estimator_kwargs={"decay": 0.5})
    last_after: dict[str, float] = {}
    for call in ("1", "2"):
        mine = [r for r in rows if r[0] == call]
        groups: dict[str, TrajectoryGroup] = {}
        for _, group_id, role, reward, *_ in mine:
            assert TrajectoryGroup([], group_id=group_id).group_role == role
            groups.setdefault(group_id, TrajectoryGroup([], group_id=group_id)).trajectories.append(Trajectory(steps=[Step()], reward=float(reward)))
        collect_reward_and_advantage_from_trajectory_groups(list(groups.values()), config)
        got = [t.steps[0].advantage for g in groups.values() for t in g.trajectories]
        assert got == [float(r[5]) for r in mine]
        for _, _, role, reward, read, advantage, after in mine:
            assert float(read) == float(reward) - float(advantage) == last_after.get(role, 0.0)
            assert float(after) == 0.5 * float(read) + 0.5 * float(reward)
            last_after[role] = float(after)
        assert {role: s["baseline"] for role, s in config.state_dict()["estimators"]["rae"].items()} == last_after
    fresh = [TrajectoryGroup([Trajectory(steps=[Step()], reward=1.0)], group_id="q3:solver")]
    collect_reward_and_advantage_from_trajectory_groups(fresh, AlgorithmConfig(estimator="rae", estimator_kwargs={"decay": 0.5}))
    assert "call 2's solver `1.0`" in DOC and fresh[0].trajectories[0].steps[0].advantage == 1.0


def test_the_core_snippet_prints_what_its_comment_says():
    code = python_block("## In the core")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/running_baselines.md", "exec"), {})
    assert out.getvalue().strip() == re.search(r"# (0\.375 1\.0)$", code, re.M).group(1)


def test_the_defaults_the_table_states():
    parameters = inspect.signature(rae).parameters
    assert '`decay` (0.95; `0 ≤ decay < 1`), `key_by` (`"role"` or `"task"`)' in DOC
    assert (parameters["decay"].default, parameters["key_by"].default) == (0.95, "role")


def test_the_plugin_example_runs_keeps_the_contract_and_continues_its_mean():
    namespace: dict[str, object] = {}
    exec(compile(python_block("## Write a stateful estimator"), "docs/running_baselines.md", "exec"), namespace)
    (spec,) = list(namespace["rllm_adv_estimators"]())  # type: ignore[operator]
    assert spec.stateful
    register_rllm_adv_estimator("running_mean", batched=spec.batched, stateful=True)(spec.list_form)
    try:
        report = check_estimator("running_mean")
        assert report.ok, str(report)
        config = AlgorithmConfig(estimator="running_mean")
        first = [TrajectoryGroup([Trajectory(steps=[Step()], reward=r) for r in (1.0, 3.0)], group_id="t:a")]
        collect_reward_and_advantage_from_trajectory_groups(first, config)
        second = [TrajectoryGroup([Trajectory(steps=[Step()], reward=0.0)], group_id="t:a")]
        collect_reward_and_advantage_from_trajectory_groups(second, config)
        assert second[0].trajectories[0].steps[0].advantage == -2.0
    finally:
        unregister_rllm_adv_estimator("running_mean")


def test_the_state_file_shown_is_what_the_worked_example_saves():
    import json

    shown = json.loads(section("## The state file and resume rules").split("```json\n", 1)[1].split("```", 1)[0])
    config = AlgorithmConfig(estimator="rae", estimator_kwargs={"decay": 0.5})
    for batch in ([("q1:solver", [1.0]), ("q1:judge", [0.0]), ("q2:solver", [0.0, 1.0])], [("q3:solver", [1.0]), ("q3:judge", [1.0])]):
        groups = [TrajectoryGroup([Trajectory(steps=[Step()], reward=r) for r in rewards], group_id=gid) for gid, rewards in batch]
        collect_reward_and_advantage_from_trajectory_groups(groups, config)
    assert json.loads(config.estimator_state.to_json()) == shown


def test_the_resume_rules_name_the_real_switches():
    from rllm_plugins.state.store import ACCEPT_ENV

    rules = section("## The state file and resume rules")
    assert f"`{ACCEPT_ENV}=decay`" in rules
    assert "accept_changed_options" in inspect.signature(AlgorithmConfig.load_state_dict).parameters
    assert 'config.load_state_dict(saved, accept_changed_options=["decay"])' in rules
