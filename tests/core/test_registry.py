"""Selecting estimators by name: enum/string keys, clear unknown-name errors, user registrations."""

import numpy as np
import pytest

from rllm_plugins import (
    AlgorithmConfig,
    Trajectory,
    TrajectoryGroup,
    available_estimators,
    collect_reward_and_advantage_from_trajectory_groups,
    get_estimator_spec,
    get_rllm_adv_estimator,
    register_rllm_adv_estimator,
    rLLMAdvantageEstimator,
    unregister_rllm_adv_estimator,
)


@pytest.fixture
def registered():
    names = []
    yield names
    for name in names:
        unregister_rllm_adv_estimator(name)


def test_enum_and_its_string_value_are_one_key():
    assert get_rllm_adv_estimator(rLLMAdvantageEstimator.RLOO) is get_rllm_adv_estimator("rloo")
    assert get_rllm_adv_estimator("RLOO") is get_rllm_adv_estimator("rloo")


def test_unknown_name_lists_available_names_and_suggests_the_closest():
    with pytest.raises(
        ValueError, match=r"Unknown advantage estimator 'rlo'\. Did you mean 'rloo'\? Available: composite, dr_grpo, echo, gigpo, gpg, grpo, .*rloo"
    ):
        get_rllm_adv_estimator("rlo")


@pytest.mark.parametrize("name", ["rllm_gigpo", "rllm_rloo", "rllm_step_reinforce"])
def test_verls_spelling_of_one_of_ours_names_the_bare_name(name):
    """Before: 'rllm_gigpo' -> "Did you mean 'trl_grpo'?"."""
    bare = name.removeprefix("rllm_")
    with pytest.raises(ValueError, match=rf"The 'rllm_' prefix is verl's spelling .*; here the name is '{bare}'\."):
        get_rllm_adv_estimator(name)
    with pytest.raises(ValueError, match=rf"here the name is '{bare}'"):
        collect_reward_and_advantage_from_trajectory_groups([TrajectoryGroup([Trajectory(reward=1.0)], group_id="t:a")], AlgorithmConfig(estimator=name))


def test_other_is_a_placeholder_not_an_estimator():
    with pytest.raises(ValueError, match="OTHER"):
        get_rllm_adv_estimator(rLLMAdvantageEstimator.OTHER)


def test_invalid_names_are_refused_at_registration():
    with pytest.raises(ValueError, match="invalid estimator name"):
        register_rllm_adv_estimator("my-estimator")


def test_registered_custom_estimator_is_selectable_and_listed(registered):
    @register_rllm_adv_estimator("centre_only")
    def centre_only(rewards, **kwargs):
        advantages = [np.asarray(r) - np.mean(r) for r in rewards]
        return advantages, advantages

    registered.append("centre_only")
    assert get_rllm_adv_estimator("centre_only") is centre_only
    assert "centre_only" in available_estimators()
    batched = get_estimator_spec("centre_only").batched_form
    np.testing.assert_allclose(batched(np.array([1.0, 3.0, 5.0]), np.array([0, 2, 3])), [-1.0, 1.0, 0.0])


def test_a_custom_default_estimator_name_is_used_not_turned_into_other(registered):
    @register_rllm_adv_estimator("always_two")
    def always_two(rewards, **kwargs):
        advantages = [np.full(len(r), 2.0) for r in rewards]
        return advantages, advantages

    registered.append("always_two")
    group = TrajectoryGroup([Trajectory(reward=0.0), Trajectory(reward=1.0)], group_id="t")
    metrics = collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(estimator="always_two"))
    assert metrics["advantage/all_groups/mean"] == 2.0


def test_both_rllm_signature_generations_work_unchanged(registered):
    seen = {}

    @register_rllm_adv_estimator("old_style")
    def old_style(rewards, norm_adv_by_std_in_grpo=True, episilon=1e-6, **kwargs):
        seen["old"] = norm_adv_by_std_in_grpo
        return rewards, rewards

    @register_rllm_adv_estimator("new_style")
    def new_style(rewards, algorithm_config):  # no **kwargs: only accepted arguments are passed
        seen["new"] = algorithm_config.estimator_map
        return rewards, rewards

    registered.extend(["old_style", "new_style"])
    groups = [TrajectoryGroup([Trajectory(reward=1.0)], group_id="t:a"), TrajectoryGroup([Trajectory(reward=2.0)], group_id="t:b")]
    config = AlgorithmConfig(estimator="old_style", estimator_map={"b": "new_style"}, norm_adv_by_std_in_grpo=False)
    metrics = collect_reward_and_advantage_from_trajectory_groups(groups, config)
    assert seen == {"old": False, "new": {"b": "new_style"}}
    assert metrics["advantage/a/mean"] == 1.0 and metrics["advantage/b/mean"] == 2.0


def test_user_code_may_override_a_builtin_with_a_warning_naming_both(registered):
    with pytest.warns(UserWarning, match=r"'rloo' from user code .* overrides the one from rllm-plugins \(built-in\)"):

        @register_rllm_adv_estimator("rloo")
        def my_rloo(rewards, **kwargs):
            return rewards, rewards

    registered.append("rloo")
    assert get_rllm_adv_estimator("rloo") is my_rloo
