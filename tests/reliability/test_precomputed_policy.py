"""Bad precomputed advantages: a ValueError naming role, group, trajectory and step, and nothing written."""

import math

import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups

CONFIG = AlgorithmConfig(use_precomputed_advantage=True)


def batch(bad_advantage):
    good = TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1, 2], advantage=0.5)], reward=1.0)], group_id="a:solver")
    bad_steps = [Step(), Step(response_ids=[1, 2], advantage=bad_advantage)]
    bad = TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1], advantage=1.0)], reward=1.0), Trajectory(steps=bad_steps, reward=0.0)], group_id="b:judge")
    return [good, bad]


@pytest.mark.parametrize("bad_advantage", ["0.5", object(), [0.1, None], [0.1, "x"], True])
def test_a_precomputed_advantage_that_is_not_numbers_is_a_value_error_naming_the_step(bad_advantage):
    groups = batch(bad_advantage)
    where = r"role 'judge', group 1 \(group_id 'b:judge'\), trajectory 1, step 1"
    with pytest.raises(ValueError, match=where + ": precomputed advantage must be a number or a list"):
        collect_reward_and_advantage_from_trajectory_groups(groups, CONFIG)
    assert groups[0].trajectories[0].steps[0].advantage == 0.5  # nothing written
    assert groups[1].trajectories[1].steps[0].advantage is None


@pytest.mark.parametrize("bad_advantage", [math.nan, [0.1, math.inf], [math.nan, 0.0, 1.0]])
def test_a_non_finite_precomputed_advantage_is_a_value_error_even_when_its_length_mismatches(bad_advantage):
    groups = batch(bad_advantage)
    with pytest.raises(ValueError, match=r"trajectory 1, step 1: precomputed advantage is not finite"):
        collect_reward_and_advantage_from_trajectory_groups(groups, CONFIG)
    assert groups[0].trajectories[0].steps[0].advantage == 0.5
