"""An int reward beyond the float64 range (``10**400``) is a ValueError naming where, not a raw ``OverflowError``.

``np.True_`` counts as 1, as the Python ``True`` does (numpy reads both as 0/1).
"""

from __future__ import annotations

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.estimators import calculate_gigpo_advantages, calculate_grpo_advantages
from rllm_plugins.types import Step, Trajectory, TrajectoryGroup

HUGE = 10**400
SHOWN = r"int 1000000000000000000000000000000000000000\.\.\. \(401 characters\)"


def group_of(*rewards: object, step_reward: object = 0.0) -> TrajectoryGroup:
    return TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1], reward=step_reward, observation="s")], reward=r) for r in rewards], group_id="task0:agent")


@pytest.mark.parametrize("estimator", ["grpo", "gigpo"])
def test_a_huge_int_trajectory_reward_names_the_trajectory(estimator):
    where = r"role 'agent', group 0 \(group_id 'task0:agent'\), trajectory 1"
    with pytest.raises(ValueError, match=rf"{where}: trajectory reward is {SHOWN}; rewards must be finite"):
        collect_reward_and_advantage_from_trajectory_groups([group_of(1.0, HUGE)], AlgorithmConfig(estimator=estimator))


def test_a_huge_int_named_reward_names_the_trajectory_and_the_name():
    group = group_of(None, None)
    for traj, value in zip(group.trajectories, (1.0, HUGE), strict=True):
        traj.metadata = {"rewards": {"score": value}}
    with pytest.raises(ValueError, match=rf"trajectory 1: named reward 'score' must be a finite number or None, got {SHOWN}"):
        collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(estimator="grpo"))


def test_a_huge_int_step_reward_names_the_step():
    with pytest.raises(ValueError, match=rf"trajectory 0, step 0: step reward must be a finite number, got {SHOWN}"):
        collect_reward_and_advantage_from_trajectory_groups([group_of(1.0, 0.0, step_reward=HUGE)], AlgorithmConfig(estimator="gigpo"))


def test_list_forms_name_the_huge_reward():
    with pytest.raises(ValueError, match=rf"group 0, trajectory 1: reward must be a finite number, got {SHOWN}"):
        calculate_grpo_advantages([[1, HUGE]])
    with pytest.raises(ValueError, match=rf"group 0, trajectory 1: reward must be a finite number, got {SHOWN}"):
        calculate_gigpo_advantages([[1, HUGE]], [[[1], [0]]], [[["s"], ["s"]]])
    with pytest.raises(ValueError, match=rf"group 0, trajectory 1: step 1: reward must be a finite number, got {SHOWN}"):
        calculate_gigpo_advantages([[1, 0]], [[[1], [0, HUGE]]], [[["s"], ["s", "t"]]])


def test_numpy_bools_are_rewards_of_0_and_1_like_python_bools():
    as_numpy = group_of(np.True_, np.False_, step_reward=np.True_)
    as_python = group_of(True, False, step_reward=True)
    for group in (as_numpy, as_python):
        collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(estimator="gigpo"))
    got = [t.steps[0].advantage for t in as_numpy.trajectories]
    assert got == [t.steps[0].advantage for t in as_python.trajectories]
    episode = 0.5 / (0.5 + 1e-6)  # rewards 1 and 0: (r - 0.5) / (0.5 + eps); both steps have return 1: step part 0
    assert got == pytest.approx([episode, -episode], rel=1e-12)
