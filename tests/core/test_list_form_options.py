"""The list forms refuse an option they do not take, as AlgorithmConfig does, and keep rLLM's calling keywords working."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups, get_rllm_adv_estimator
from rllm_plugins.estimators import BUILTIN_SPECS
from rllm_plugins.options import spec_options

OUTCOME = [spec.name for spec in BUILTIN_SPECS if spec.level == "outcome"]
STEP = [spec.name for spec in BUILTIN_SPECS if spec.level == "step"]


def step_inputs():
    return [np.array([1.0, 0.0])], [[np.array([0.0, 1.0]), np.array([0.0])]], [[["a", "b"], ["a"]]]


@pytest.mark.parametrize("name", OUTCOME)
def test_every_outcome_built_in_refuses_an_unknown_option_by_its_list_form(name):
    with pytest.raises(ValueError, match=r"unknown option 'epsilonn'; its options: .*Did you mean 'epsilon'\?"):
        get_rllm_adv_estimator(name)([np.array([1.0, 0.0])], epsilonn=0.1)


@pytest.mark.parametrize("name", STEP)
def test_every_step_built_in_refuses_an_unknown_option_by_its_list_form(name):
    typo, option = ("termz", "terms") if name == "composite" else ("gama", "gamma")
    with pytest.raises(ValueError, match=rf"unknown option '{typo}'; its options: .*{option}.*Did you mean '{option}'\?"):
        get_rllm_adv_estimator(name)(*step_inputs(), **{typo: 0.9})


@pytest.mark.parametrize("spec", BUILTIN_SPECS, ids=lambda s: s.name)
def test_the_listed_options_are_the_ones_algorithm_config_accepts(spec):
    with pytest.raises(ValueError) as caught:
        args = step_inputs() if spec.level == "step" else ([np.array([1.0, 0.0])],)
        spec.list_form(*args, zzz_unknown=1)
    listed = str(caught.value).split("its options: ", 1)[1].split(".", 1)[0]
    want = set(spec_options(spec).defaults) | {"epsilon"}
    assert set(listed.split(", ")) == want


def test_the_spec_signature_and_rllm_main_signature_keep_working():
    grpo = get_rllm_adv_estimator("grpo")
    spec_style, _ = grpo([np.array([1.0, 0.0])], False, 0.1)  # (rewards, norm_adv_by_std_in_grpo, episilon)
    keyword_style, _ = grpo(rewards=[np.array([1.0, 0.0])], norm_adv_by_std_in_grpo=True, episilon=0.5)
    main_style, _ = grpo([np.array([1.0, 0.0])], AlgorithmConfig(norm_adv_by_std_in_grpo=False), traj_groups=None)
    assert spec_style[0].tolist() == main_style[0].tolist() == [0.5, -0.5]
    assert keyword_style[0].tolist() == [0.5 / 1.0, -0.5 / 1.0]


def test_epsilon_is_accepted_by_every_built_in_as_the_spec_gives_every_estimator_one():
    maxrl = get_rllm_adv_estimator("maxrl")
    assert "epsilon" not in inspect.signature(BUILTIN_SPECS[[s.name for s in BUILTIN_SPECS].index("maxrl")].batched).parameters
    assert maxrl([np.array([1.0, 0.0])], epsilon=0.0)[0][0].tolist() == [1.0, -1.0]


def test_estimator_map_keeps_another_roles_options_out_of_an_outcome_estimators_call():
    groups = [
        TrajectoryGroup([Trajectory(steps=[Step(reward=1.0, observation="s")], reward=1.0), Trajectory(steps=[Step(observation="s")], reward=0.0)], "t:agent"),
        TrajectoryGroup([Trajectory(steps=[Step()], reward=1.0), Trajectory(steps=[Step()], reward=0.0)], "t:judge"),
    ]
    config = AlgorithmConfig(estimator="grpo", estimator_map={"agent": "gigpo"}, estimator_kwargs={"gamma": 0.9})
    collect_reward_and_advantage_from_trajectory_groups(groups, config)
    assert [t.steps[0].advantage for t in groups[1].trajectories] == pytest.approx([1.0, -1.0], rel=1e-5)
