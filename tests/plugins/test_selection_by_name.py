"""Installed plugins used by name through the collector, and user-code overrides of registered names."""

from __future__ import annotations

import numpy as np
import pytest

from rllm_plugins import (
    AlgorithmConfig,
    Step,
    Trajectory,
    TrajectoryGroup,
    collect_reward_and_advantage_from_trajectory_groups,
    get_rllm_adv_estimator,
    register_rllm_adv_estimator,
    unregister_rllm_adv_estimator,
)


def group(group_id: str, rewards: list[float], steps: int = 2) -> TrajectoryGroup:
    return TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1, 2]) for _ in range(steps)], reward=r) for r in rewards], group_id=group_id)


def advantages(g: TrajectoryGroup) -> list[list[float]]:
    return [[step.advantage for step in traj.steps] for traj in g.trajectories]


def test_collector_uses_the_installed_example_plugin_by_name():
    groups = [group("t0:solver", [0.0, 1.0, 5.0]), group("t1:solver", [2.0, 2.0, 8.0, 3.0])]
    metrics = collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="median_baseline"))
    # medians 1 and 2.5
    assert advantages(groups[0]) == [[-1.0, -1.0], [0.0, 0.0], [4.0, 4.0]]
    assert advantages(groups[1]) == [[-0.5, -0.5], [-0.5, -0.5], [5.5, 5.5], [0.5, 0.5]]
    assert metrics["advantage/solver/mean"] == pytest.approx(8.0 / 7)  # (3 + 5) / 7
    assert metrics["advantage/solver/fraction_zero"] == pytest.approx(1 / 7)


def test_estimator_map_gives_one_role_the_plugin_and_another_a_builtin():
    groups = [group("t0:judge", [1.0, 3.0, 10.0]), group("t0:solver", [1.0, 3.0])]
    config = AlgorithmConfig(estimator="reinforce", estimator_map={"judge": "median_baseline"})
    collect_reward_and_advantage_from_trajectory_groups(groups, config)
    assert advantages(groups[0]) == [[-2.0, -2.0], [0.0, 0.0], [7.0, 7.0]]
    assert advantages(groups[1]) == [[1.0, 1.0], [3.0, 3.0]]


def _doubled(rewards: list[np.ndarray], **kwargs: object) -> tuple[list[np.ndarray], list[np.ndarray]]:
    out = [2.0 * np.asarray(r, dtype=np.float64) for r in rewards]
    return out, out


@pytest.mark.parametrize(
    ("name", "previous"),
    [("rloo", "rllm-plugins (built-in)"), ("median_baseline", "plugin 'median_baseline' (distribution rllm-median-baseline 0.1.0)")],
)
def test_user_code_may_override_a_registered_name_with_a_warning_naming_both(name, previous):
    expected = f"estimator {name!r} from user code ({__name__}._doubled) overrides the one from {previous}"
    try:
        with pytest.warns(UserWarning) as caught:
            register_rllm_adv_estimator(name)(_doubled)
        assert [str(w.message) for w in caught] == [expected]
        assert get_rllm_adv_estimator(name) is _doubled
    finally:
        unregister_rllm_adv_estimator(name)
    assert get_rllm_adv_estimator(name) is not _doubled
