"""docs/turn_level.md says what the code does: its worked examples and its plugin example are computed here."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.estimators import calculate_gigpo_advantages
from rllm_plugins.registry import register_rllm_adv_estimator, unregister_rllm_adv_estimator
from rllm_plugins.testing import check_estimator

DOC = (Path(__file__).resolve().parents[2] / "docs" / "turn_level.md").read_text()


def section(title: str) -> str:
    return DOC.split(title, 1)[1].split("\n#", 1)[0]


def test_the_worked_example_table_is_what_gigpo_computes():
    text = section("### The worked example")
    rows = {int(m[1]): [float(m[2]), float(m[3])] for m in re.finditer(r"^\| (\d) \| (-?[\d.]+) \| (-?[\d.]+) \|$", text, re.M)}
    assert set(rows) == {0, 1}
    groups = [
        TrajectoryGroup(
            [
                Trajectory(steps=[Step(reward=0.0, observation="start"), Step(reward=1.0, observation="door")], reward=1.0),
                Trajectory(steps=[Step(reward=0.0, observation="start"), Step(reward=0.0, observation="start")], reward=0.0),
            ],
            group_id="task:agent",
        )
    ]
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="gigpo", estimator_kwargs={"gamma": 0.5}))
    got = [[round(s.advantage, 6) for s in t.steps] for t in groups[0].trajectories]
    assert got == [rows[0], rows[1]]
    assert "mean 1/6, std 0.2357" in text and round(float(np.std([0.5, 0.0, 0.0])), 4) == 0.2357


def test_the_verl_agent_variant_table_is_what_the_options_compute():
    text = section("### verl-agent's variant")
    native = re.search(r"\| rllm-plugins .*\| (-?[\d.]+) \| (-?[\d.]+) \|", text)
    variant = re.search(r"\| verl-agent \(`episode_stats=\"step\"`.*\| (-?[\d.]+) \| (-?[\d.]+) \|", text)
    args = ([np.array([1.0, 0.0])], [[np.array([0.0, 0.0, 1.0]), np.array([0.0])]], [[["a", "b", "c"], ["x"]]])
    ours, _ = calculate_gigpo_advantages(*args, norm_adv_by_std_in_grpo=False)
    theirs, _ = calculate_gigpo_advantages(*args, norm_adv_by_std_in_grpo=False, episode_stats="step", std_ddof=1)
    assert [float(native[1]), float(native[2])] == [ours[0][0][0], ours[0][1][0]]
    assert [float(variant[1]), float(variant[2])] == [theirs[0][0][0], theirs[0][1][0]]
    assert np.unique(ours[0][0]).size == np.unique(theirs[0][0]).size == 1  # "each step"


def test_the_plugin_example_runs_keeps_the_contract_and_credits_only_last_steps():
    code = section("## Write a step-level plugin").split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, object] = {}
    exec(compile(code, "docs/turn_level.md", "exec"), namespace)
    (spec,) = list(namespace["rllm_adv_estimators"]())  # type: ignore[operator]
    assert spec.level == "step"
    register_rllm_adv_estimator("last_step_credit", batched=spec.batched, level="step")(spec.list_form)
    try:
        assert check_estimator("last_step_credit").ok
        groups = [
            TrajectoryGroup(
                [Trajectory(steps=[Step(), Step(), Step()], reward=3.0), Trajectory(steps=[Step()], reward=1.0)],
                group_id="t:agent",
            )
        ]
        collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="last_step_credit"))
        assert [[s.advantage for s in t.steps] for t in groups[0].trajectories] == [[0.0, 0.0, 1.0], [-1.0]]
    finally:
        unregister_rllm_adv_estimator("last_step_credit")


@pytest.mark.parametrize("name", ["gigpo", "step_reinforce"])
def test_every_built_in_named_in_the_table_is_step_level(name):
    from rllm_plugins import get_estimator_spec

    assert f"| `{name}` |" in DOC
    assert get_estimator_spec(name).level == "step"


def test_the_core_api_pages_snippet_gives_one_advantage_per_step_of_the_agent_role():
    page = (Path(__file__).resolve().parents[2] / "docs" / "core_api.md").read_text()
    code = page.split("## Turn-level credit assignment", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    agent = TrajectoryGroup(
        [
            Trajectory(steps=[Step(reward=0.0, observation="a"), Step(reward=1.0, observation="b")], reward=1.0),
            Trajectory(steps=[Step(observation="a")], reward=0.0),
        ],
        group_id="t:agent",
    )
    judge = TrajectoryGroup([Trajectory(steps=[Step(), Step()], reward=1.0), Trajectory(steps=[Step()], reward=0.0)], group_id="t:judge")
    names = {"AlgorithmConfig": AlgorithmConfig, "collect_reward_and_advantage_from_trajectory_groups": collect_reward_and_advantage_from_trajectory_groups}
    exec(compile(code, "docs/core_api.md", "exec"), {**names, "groups": [agent, judge]})
    first, second = ([s.advantage for s in t.steps] for t in agent.trajectories)
    a_e, z = 0.5 / (0.5 + 1e-6), 0.45 / (0.45 + 1e-6)  # state a: returns 0.9 (gamma 0.9) and 0
    assert first == [pytest.approx(a_e + z), pytest.approx(a_e)]
    assert second == [pytest.approx(-a_e - z)]
    assert [[s.advantage for s in t.steps] for t in judge.trajectories] == [[a_e, a_e], [-a_e]]  # broadcast


def test_the_turn_grpo_section_names_every_option_with_its_default():
    from rllm_plugins.options import spec_options
    from rllm_plugins.registry import get_estimator

    text = section("## `turn_grpo`").split("Options: ", 1)[1].split("\n\n", 1)[0]
    named = dict(re.findall(r"`(\w+)`[^(`]*\(([^;)]*)", text))
    defaults = {k: v for k, v in spec_options(get_estimator("turn_grpo").spec).defaults.items() if k != "norm_adv_by_std_in_grpo"}
    assert set(named) == set(defaults), (named, defaults)
    for name, default in defaults.items():
        written = named[name].strip().strip("`")
        assert (written == f'"{default}"') if isinstance(default, str) else (float(written) == default), (name, written, default)
