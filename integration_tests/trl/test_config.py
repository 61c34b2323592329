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


def test_estimator_map_needs_a_role_column():
    with pytest.raises(ValueError, match="role_column"):
        RLLMGRPOConfig(**BASE, adv_estimator_map={"judge": "rloo"})


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ({"scale_rewards": "batch"}, "scale_rewards='batch'"),
        ({"scale_rewards": False}, "scale_rewards='none'"),
    ],
)
def test_overridden_trl_settings_warn_naming_the_setting(setting, named):
    with pytest.warns(UserWarning, match="these settings are ignored") as record:
        RLLMGRPOConfig(**BASE, adv_estimator="rloo", **setting)
    assert named in str(record[0].message)


def test_normalize_then_sum_is_honoured_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        config = RLLMGRPOConfig(**BASE, adv_estimator="rloo", multi_objective_aggregation="normalize_then_sum")
    assert config.multi_objective_aggregation == "normalize_then_sum"


def test_unknown_aggregation_is_refused_at_config_time():
    with pytest.raises(ValueError, match="multi_objective_aggregation must be one of 'sum_then_normalize', 'normalize_then_sum', got 'gdpo'"):
        RLLMGRPOConfig(**BASE, multi_objective_aggregation="gdpo")


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
