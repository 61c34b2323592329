"""docs/turn_level.md's composite section: the table of what a term reads lists every built-in that reads it, and the state example."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.calling import accepted_keywords
from rllm_plugins.estimators import BUILTIN_SPECS
from rllm_plugins.needs import needs_of

DOC = (Path(__file__).resolve().parents[2] / "docs" / "turn_level.md").read_text()
SECTION = DOC.split("## `composite`: a weighted sum of estimators", 1)[1].split("\n## ", 1)[0]


def listed(what: str) -> set[str]:
    row = re.search(rf"^\| {re.escape(what)} \| .* \| (.*) \|$", SECTION, re.M)
    assert row, what
    return set(re.findall(r"`([a-z_]+)`", row[1]))


def reads_config(spec) -> bool:
    return spec.batched is not None and "algorithm_config" in accepted_keywords(spec.batched)[0]


@pytest.mark.parametrize(
    ("what", "reads"),
    [
        ("anchor states", lambda spec: needs_of(spec).anchors),
        ("response lengths", lambda spec: needs_of(spec).lengths),
        ("a state", lambda spec: needs_of(spec).state),
        ("the `AlgorithmConfig`", reads_config),
    ],
)
def test_the_table_lists_exactly_the_built_ins_that_read_it(what, reads):
    assert listed(what) == {spec.name for spec in BUILTIN_SPECS if spec.name != "composite" and reads(spec)}


def test_the_state_example_is_the_state_the_collector_keeps():
    config = AlgorithmConfig(estimator="composite", estimator_kwargs={"terms": [["grpo", 1.0], ["rae", 1.0, {"decay": 0.5}]]})
    groups = [TrajectoryGroup([Trajectory(steps=[Step()], reward=r) for r in (0.5, 0.0)], group_id="t:a")]
    collect_reward_and_advantage_from_trajectory_groups(groups, config)  # b: 0 -> 0.25 (after 0.5) -> 0.125 (after 0.0)
    assert '`{"terms": {"1:rae": {"baseline": 0.25}}}`' in SECTION
    assert config.estimator_state.get("composite", "a") == {"terms": {"1:rae": {"baseline": 0.125}}}
    groups = [TrajectoryGroup([Trajectory(steps=[Step()], reward=0.375)], group_id="t:a")]
    collect_reward_and_advantage_from_trajectory_groups(groups, config)
    assert config.estimator_state.get("composite", "a") == {"terms": {"1:rae": {"baseline": 0.25}}}
