"""``RLLMGRPOConfig``: fields, validation at construction, command-line parsing."""

from __future__ import annotations

import warnings

import pytest
from rllm_trl import RLLMGRPOConfig
from transformers import HfArgumentParser

BASE = {"output_dir": "unused", "use_cpu": True, "bf16": False}


def test_defaults_are_rllm_grpo_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        config = RLLMGRPOConfig(**BASE)
    assert (config.adv_estimator, config.norm_adv_by_std_in_grpo, config.adv_estimator_kwargs, config.adv_estimator_map, config.role_column) == (
        "grpo",
        True,
        {},
        {},
        None,
    )


def test_unknown_estimator_raises_with_the_available_names():
    with pytest.raises(ValueError, match=r"adv_estimator: Unknown advantage estimator 'rlooo'\. Did you mean 'rloo'\? Available: .*median_baseline"):
        RLLMGRPOConfig(**BASE, adv_estimator="rlooo")


def test_unknown_estimator_in_the_map_names_the_role():
    with pytest.raises(ValueError, match=r"adv_estimator_map\['judge'\]: Unknown advantage estimator 'nope'"):
        RLLMGRPOConfig(**BASE, adv_estimator_map={"judge": "nope"}, role_column="role")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"adv_estimator": "rllm_rloo"},
            "adv_estimator='rllm_rloo': the 'rllm_' prefix is verl's spelling (algorithm.adv_estimator=rllm_<name>); in TRL set adv_estimator='rloo'",
        ),
        (
            {"adv_estimator_map": {"judge": "rllm_median_baseline"}, "role_column": "role"},
            "adv_estimator_map['judge']='rllm_median_baseline': the 'rllm_' prefix is verl's spelling (algorithm.adv_estimator=rllm_<name>); "
            "in TRL set adv_estimator_map['judge']='median_baseline'",
        ),
    ],
)
def test_the_verl_spelling_of_a_name_says_to_drop_the_prefix(fields, message):
    with pytest.raises(ValueError) as caught:
        RLLMGRPOConfig(**BASE, **fields)
    assert str(caught.value) == message


def test_estimator_map_needs_a_role_column():
    with pytest.raises(ValueError, match="role_column"):
        RLLMGRPOConfig(**BASE, adv_estimator_map={"judge": "rloo"})


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ({"scale_rewards": "batch"}, "scale_rewards='batch'"),
        ({"scale_rewards": False}, "scale_rewards='none'"),
        ({"multi_objective_aggregation": "normalize_then_sum"}, "multi_objective_aggregation='normalize_then_sum'"),
    ],
)
def test_overridden_trl_settings_warn_naming_the_setting(setting, named):
    with pytest.warns(UserWarning, match="these settings are ignored") as record:
        RLLMGRPOConfig(**BASE, adv_estimator="rloo", **setting)
    assert named in str(record[0].message)


def test_command_line_parses_every_field():
    (config,) = HfArgumentParser(RLLMGRPOConfig).parse_args_into_dataclasses(
        [
            "--output_dir",
            "unused",
            "--use_cpu",
            "--bf16",
            "false",
            "--adv_estimator",
            "PRPO",
            "--norm_adv_by_std_in_grpo",
            "false",
            "--adv_estimator_kwargs",
            '{"epsilon": 0.001}',
            "--adv_estimator_map",
            '{"judge": "rloo"}',
            "--role_column",
            "role",
        ]
    )
    assert config.adv_estimator == "prpo" and config.norm_adv_by_std_in_grpo is False
    assert config.adv_estimator_kwargs == {"epsilon": 0.001} and config.adv_estimator_map == {"judge": "rloo"} and config.role_column == "role"


def test_help_texts_are_present():
    fields = RLLMGRPOConfig.__dataclass_fields__
    for name in ("adv_estimator", "norm_adv_by_std_in_grpo", "adv_estimator_kwargs", "adv_estimator_map", "role_column"):
        assert fields[name].metadata["help"]


def test_a_per_role_loss_pair_is_refused_because_trl_has_one_loss():
    # rLLM main's estimator_map values may be (estimator, loss_fn) pairs (rllm/trainer/algorithms/config.py, AlgorithmConfig.__post_init__)
    message = r"per-role policy losses \('judge': \('rloo', 'ppo'\)\) are not applied with TRL: GRPOTrainer uses GRPOConfig\.loss_type"
    with pytest.raises(ValueError, match=message):
        RLLMGRPOConfig(**BASE, adv_estimator_map={"judge": ("rloo", "ppo")}, role_column="role")
    with pytest.raises(ValueError, match="are not applied with TRL"):  # the pair as JSON from the command line
        RLLMGRPOConfig(**BASE, adv_estimator_map='{"judge": ["rloo", "ppo"]}', role_column="role")


def test_algorithm_config_is_built_by_the_core_wiring():
    from rllm_plugins import AlgorithmConfig, RolloutCorrectionConfig

    fields = {"adv_estimator": "rloo", "norm_adv_by_std_in_grpo": False, "adv_estimator_kwargs": {"epsilon": 1e-3}, "adv_estimator_map": {"judge": "grpo"}}
    config = RLLMGRPOConfig(**BASE, **fields, role_column="role")
    assert config.algorithm_config() == AlgorithmConfig(
        estimator="rloo",
        norm_adv_by_std_in_grpo=False,
        estimator_kwargs={"epsilon": 1e-3},
        estimator_map={"judge": "grpo"},
        rollout_correction=RolloutCorrectionConfig(tis_cap=2.0),  # rLLM main's from_config default
    )


def test_passk_training_k_is_checked_against_num_generations():
    assert RLLMGRPOConfig(**BASE, adv_estimator="passk_training", adv_estimator_kwargs={"k": 4}, num_generations=8).adv_estimator_kwargs == {"k": 4}
    with pytest.raises(ValueError, match=r"adv_estimator with num_generations=8: estimator 'passk_training': k=8 equals the group size"):
        RLLMGRPOConfig(**BASE, adv_estimator="passk_training", adv_estimator_kwargs={"k": 8}, num_generations=8)
    with pytest.raises(ValueError, match=r"adv_estimator_map\['judge'\] with num_generations=8: .*k=9 is larger than the group size 8"):
        RLLMGRPOConfig(**BASE, adv_estimator_map={"judge": "passk_training"}, adv_estimator_kwargs={"k": 9}, role_column="role", num_generations=8)
    with pytest.raises(ValueError, match="option 'k' of estimator 'passk_training' must be an int, got str '4'"):
        RLLMGRPOConfig(**BASE, adv_estimator="passk_training", adv_estimator_kwargs={"k": "4"}, num_generations=8)
