"""Data model and configuration: group roles, enum mapping, from_config, deprecations."""

import warnings

import pytest
from omegaconf import OmegaConf

from rllm_plugins import (
    AlgorithmConfig,
    RolloutCorrectionConfig,
    Step,
    Trajectory,
    TrajectoryGroup,
    collect_reward_and_advantage_from_trajectory_groups,
    rLLMAdvantageEstimator,
)


@pytest.mark.parametrize(
    "group_id, role",
    [("task7:solver", "solver"), ("task7", "all_groups"), ("", "all_groups"), ("task7:", "all_groups"), ("a:b:c", "b"), (":judge", "judge")],
)
def test_group_role_is_parsed_from_group_id_as_rllm_does(group_id, role):
    assert TrajectoryGroup([Trajectory(reward=1.0)], group_id=group_id).group_role == role


def test_trajectory_defaults():
    a, b = Trajectory(), Trajectory()
    assert a.reward is None and a.steps == [] and a.name == "default_traj_name" and a.uid != b.uid


def test_unknown_enum_values_map_to_other():
    assert rLLMAdvantageEstimator("my_estimator") is rLLMAdvantageEstimator.OTHER
    assert rLLMAdvantageEstimator("rloo") is rLLMAdvantageEstimator.RLOO


def test_per_step_mode_with_an_outcome_level_estimator_broadcasts_with_a_deprecation_warning():
    config = AlgorithmConfig(stepwise_advantage_mode="per_step")
    groups = [TrajectoryGroup([Trajectory(steps=[Step(), Step()], reward=1.0), Trajectory(steps=[Step()], reward=0.0)], group_id="t:solver")]
    with pytest.warns(DeprecationWarning, match="role 'solver', estimator 'grpo' \\(outcome-level\\): stepwise_advantage_mode='per_step' is deprecated"):
        collect_reward_and_advantage_from_trajectory_groups(groups, config)
    assert [[s.advantage for s in t.steps] for t in groups[0].trajectories] == [[0.5 / (0.5 + 1e-6)] * 2, [-0.5 / (0.5 + 1e-6)]]


def test_other_modes_are_rejected():
    with pytest.raises(ValueError, match="stepwise_advantage_mode"):
        AlgorithmConfig(stepwise_advantage_mode="per_token")


def test_custom_estimator_name_is_kept_not_turned_into_other():
    config = AlgorithmConfig(estimator="My_Custom")
    assert config.estimator == "my_custom"
    assert config.estimator_name("any_role") == "my_custom"


def test_known_names_become_enum_members_and_roles_use_the_map():
    config = AlgorithmConfig(estimator="grpo", estimator_map={"judge": rLLMAdvantageEstimator.REINFORCE, "solver": "rloo"})
    assert config.estimator is rLLMAdvantageEstimator.GRPO
    assert [config.estimator_name(r) for r in ("solver", "judge", "other_role")] == ["rloo", "reinforce", "grpo"]


NESTED = {
    "algorithm": {"adv_estimator": "rloo"},
    "rllm": {
        "stepwise_advantage": {"mode": "broadcast", "norm_adv_by_std_in_grpo": False, "use_rllm": True},
        "algorithm": {
            "use_precomputed_advantage": True,
            "loss_fn": "ppo",
            "lr_schedule": "cosine",
            "warmup_steps_ratio": 0.1,
            "estimator_map": {"judge": "reinforce"},
            "estimator_kwargs": {"epsilon": 1e-3},
        },
    },
}
with pytest.warns(DeprecationWarning, match="use_rllm"):
    EXPECTED = AlgorithmConfig(
        use_rllm=True,
        estimator=rLLMAdvantageEstimator.RLOO,
        estimator_map={"judge": "reinforce"},
        norm_adv_by_std_in_grpo=False,
        use_precomputed_advantage=True,
        loss_fn="ppo",
        lr_schedule="cosine",
        warmup_steps_ratio=0.1,
        estimator_kwargs={"epsilon": 1e-3},
        rollout_correction=RolloutCorrectionConfig(tis_cap=2.0),  # rLLM main's from_config default (its dataclass says 5.0)
    )


def test_from_config_reads_a_plain_mapping():
    with pytest.warns(DeprecationWarning, match="use_rllm"):
        assert AlgorithmConfig.from_config(NESTED) == EXPECTED


def test_from_config_reads_an_omegaconf_dictconfig_in_struct_mode():
    config = OmegaConf.create(NESTED)
    OmegaConf.set_struct(config, True)
    with pytest.warns(DeprecationWarning, match="use_rllm"):
        result = AlgorithmConfig.from_config(config)
    assert result == EXPECTED
    assert type(result.estimator_map) is dict and type(result.estimator_kwargs) is dict


def test_from_config_defaults_and_per_step_mode():
    config = AlgorithmConfig.from_config({"algorithm": {"adv_estimator": "my_plugin"}, "rllm": {"stepwise_advantage": {"mode": "per_step"}}})
    assert config == AlgorithmConfig(estimator="my_plugin", rollout_correction=RolloutCorrectionConfig(tis_cap=2.0), stepwise_advantage_mode="per_step")


def test_from_config_falls_back_to_rllm_algorithm_adv_estimator():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = AlgorithmConfig.from_config({"rllm": {"algorithm": {"adv_estimator": "reinforce"}}})
    assert config.estimator is rLLMAdvantageEstimator.REINFORCE


@pytest.mark.parametrize(
    ("field", "form"),
    [
        ("estimator_kwargs", "option name -> value, e.g. {'epsilon': 1e-4}"),
        ("estimator_map", "role -> estimator name or (estimator, loss_fn), e.g. {'judge': 'rloo'}"),
        ("loss_fn_map", "role -> policy loss name"),
    ],
)
def test_a_none_mapping_field_is_a_value_error_naming_the_field(field, form):
    with pytest.raises(ValueError) as error:
        AlgorithmConfig(**{field: None})
    assert str(error.value) == f"AlgorithmConfig.{field} must be a mapping of {form}, got NoneType None; leave it out (or give {{}}) for none"


def test_estimator_kwargs_written_as_text_in_a_config_is_a_value_error_naming_the_field():
    with pytest.raises(ValueError) as error:
        AlgorithmConfig.from_config({"adv_estimator": "grpo", "estimator_kwargs": "epsilon=1e-4"})
    assert str(error.value) == "AlgorithmConfig.estimator_kwargs must be a mapping of option name -> value, e.g. {'epsilon': 1e-4}, got str 'epsilon=1e-4'"
