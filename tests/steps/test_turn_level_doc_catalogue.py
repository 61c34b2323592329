"""docs/turn_level.md's sections on turn_grpo, ROLL's settings, similarity anchors and composite say what the code does."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups, get_estimator_spec
from rllm_plugins.estimators import calculate_step_reinforce_advantages, calculate_turn_grpo_advantages

DOC = (Path(__file__).resolve().parents[2] / "docs" / "turn_level.md").read_text()


def section(title: str) -> str:
    return DOC.split(title, 1)[1].split("\n## ", 1)[0]


def numbers(cell: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+\.\d+", cell)]


def test_the_turn_grpo_worked_example_is_what_the_collector_computes():
    text = section("## `turn_grpo`: a per-turn baseline by turn index")
    inputs = {int(m[1]): (float(m[2]), [float(x) for x in m[3].split(", ")]) for m in re.finditer(r"^\| (\d) \| (\d) \| ([\d, ]+) \|$", text, re.M)}
    assert set(inputs) == {0, 1, 2}
    for ended in ("absorbing", "present"):
        row = re.search(rf'^\| `"{ended}"` \| (.*) \| (.*) \| (.*) \|$', text, re.M)
        trajectories = [Trajectory(steps=[Step(reward=r) for r in inputs[i][1]], reward=inputs[i][0]) for i in range(3)]
        groups = [TrajectoryGroup(trajectories, group_id="task:agent")]
        collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="turn_grpo", estimator_kwargs={"ended": ended}))
        got = [[round(s.advantage, 6) for s in t.steps] for t in groups[0].trajectories]
        assert got == [numbers(row[1]), numbers(row[2]), numbers(row[3])]
    assert "`A^E = (0.707107, -1.414214, 0.707107)`" in text
    episode = np.array([1.0, 0.0, 1.0])
    assert np.round((episode - episode.mean()) / episode.std(), 6).tolist() == [0.707107, -1.414214, 0.707107]


def test_the_roll_settings_table_names_options_that_give_those_formulas():
    text = section("## `step_reinforce`: ROLL's normalisation settings")
    options = re.findall(r"^\| (?:`(?:grouping|method): [a-z_]+`|HEAD `norm_mean_type).*? \| (`[^|]*`)(?: \(default\))? \|", text, re.M)
    assert len(options) == 11
    outcomes, rewards = [[1.0, 0.0]], [[[1.0, 2.0], [0.0]]]
    for cell in options:
        kwargs = eval(f"dict({cell.replace('`', '')})")  # the cell is the options as Python keywords
        calculate_step_reinforce_advantages(outcomes, rewards, **kwargs)  # each named option exists and runs
    roll, _ = calculate_step_reinforce_advantages(outcomes, rewards, std_ddof=1, min_std=1e-6)
    xs = np.array([3.0, 2.0, 0.0])
    assert np.concatenate(roll[0]).tolist() == pytest.approx(((xs - xs.mean()) / (xs.std(ddof=1) + 1e-6)).tolist(), rel=1e-12)


def test_the_composite_snippet_runs_and_gives_the_weighted_sum():
    code = section("## `composite`: a weighted sum of estimators").split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, object] = {}
    exec(compile(code, "docs/turn_level.md", "exec"), namespace)
    config = namespace["config"]
    groups = [TrajectoryGroup([Trajectory(steps=[Step(reward=0.0), Step(reward=1.0)], reward=1.0), Trajectory(steps=[Step(reward=0.0)], reward=0.0)], "t:a")]
    collect_reward_and_advantage_from_trajectory_groups(groups, config)
    turn, _ = calculate_turn_grpo_advantages([[1.0, 0.0]], [[[0.0, 1.0], [0.0]]], lam=0.5)
    grpo = [0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6)]
    for i, traj in enumerate(groups[0].trajectories):
        assert [s.advantage for s in traj.steps] == pytest.approx((0.5 * grpo[i] + 0.5 * turn[0][i]).tolist(), rel=1e-12)


@pytest.mark.parametrize("name", ["turn_grpo", "composite"])
def test_the_new_built_ins_are_in_the_table_and_step_level(name):
    assert f"| `{name}` |" in DOC
    assert get_estimator_spec(name).level == "step" and not get_estimator_spec(name).needs_anchors


def test_the_similarity_threshold_named_in_the_docs_is_the_one_checked():
    text = section("## GiGPO similarity anchors")
    assert "The threshold must be in (0, 1]" in text
    with pytest.raises(ValueError, match=r"in \(0, 1\]"):
        collect_reward_and_advantage_from_trajectory_groups(
            [TrajectoryGroup([Trajectory(steps=[Step(observation="a")], reward=1.0)], "t:a")],
            AlgorithmConfig(estimator="gigpo", estimator_kwargs={"anchor_similarity": 0.0}),
        )
