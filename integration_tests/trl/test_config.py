"""``RLLMGRPOConfig``: fields, validation at construction, command-line parsing."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
from rllm_trl import RLLMGRPOConfig, advantage_settings
from transformers import HfArgumentParser
from trl import GRPOConfig

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
    ("setting", "message"),
    [
        (
            {"scale_rewards": "batch"},
            "RLLMGRPOConfig: scale_rewards='batch' is overridden by adv_estimator 'rloo', which computes the advantages its own way; "
            "set adv_estimator='trl_grpo' to follow scale_rewards",
        ),
        (
            {"scale_rewards": False},
            "RLLMGRPOConfig: scale_rewards='none' is overridden by adv_estimator 'rloo', which computes the advantages its own way; "
            "set adv_estimator='trl_grpo' to follow scale_rewards (or norm_adv_by_std_in_grpo=False for unscaled advantages)",
        ),
    ],
)
def test_overridden_trl_settings_warn_once_naming_the_setting_and_the_estimator(setting, message):
    with pytest.warns(UserWarning) as record:
        RLLMGRPOConfig(**BASE, adv_estimator="rloo", **setting)
    assert [str(w.message) for w in record] == [message]


def test_overriding_estimators_in_the_map_are_named_with_the_default_one():
    with pytest.warns(UserWarning) as record:
        RLLMGRPOConfig(**BASE, adv_estimator="trl_grpo", adv_estimator_map={"judge": "rloo", "critic": "grpo"}, role_column="role", scale_rewards="none")
    assert [str(w.message) for w in record] == [
        "RLLMGRPOConfig: scale_rewards='none' is overridden by the estimators ['rloo', 'grpo'], which compute the advantages their own way; "
        "set adv_estimator='trl_grpo' to follow scale_rewards (or norm_adv_by_std_in_grpo=False for unscaled advantages)"
    ]


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none", True, False])
def test_trl_grpo_follows_scale_rewards_without_warnings(scale_rewards):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        config = RLLMGRPOConfig(**BASE, adv_estimator="trl_grpo", scale_rewards=scale_rewards)
    mode = {True: "group", False: "none"}.get(scale_rewards, scale_rewards)
    assert advantage_settings(config).trl_settings == ({} if mode == "group" else {"scale_rewards": mode})  # TRL's default is not passed


@pytest.mark.parametrize("scale_rewards", ["group", "batch"])
def test_trl_grpo_batch_takes_batch_and_the_default_without_warnings(scale_rewards):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        RLLMGRPOConfig(**BASE, adv_estimator="trl_grpo_batch", scale_rewards=scale_rewards)


def test_unscaled_rllm_estimators_with_scale_rewards_none_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        RLLMGRPOConfig(**BASE, adv_estimator="grpo", norm_adv_by_std_in_grpo=False, scale_rewards="none")


def test_a_plain_grpo_config_is_read_as_trl_grpo_following_its_settings():
    settings = advantage_settings(GRPOConfig(**BASE, scale_rewards="batch"))
    assert (settings.estimator, settings.estimator_map, settings.norm_adv_by_std_in_grpo, settings.trl_settings, settings.overridden) == (
        "trl_grpo",
        {},
        True,
        {"scale_rewards": "batch"},
        (),
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"adv_estimator": "trl_grpo", "scale_rewards": "batch", "norm_adv_by_std_in_grpo": False},
            "estimator 'trl_grpo': scale_rewards='batch' divides by the batch std but norm_adv_by_std_in_grpo=False "
            "asks for no scaling: set scale_rewards='none' for unscaled advantages, or norm_adv_by_std_in_grpo=True",
        ),
        (
            {"adv_estimator": "trl_grpo_batch", "scale_rewards": "none"},
            "estimator 'trl_grpo_batch': trl_grpo_batch scales by the batch std, but scale_rewards='none': choose trl_grpo, which follows scale_rewards",
        ),
        (
            {"adv_estimator": "trl_grpo", "multi_objective_aggregation": "normalise_then_sum"},
            "multi_objective_aggregation must be one of 'sum_then_normalize', 'normalize_then_sum', got 'normalise_then_sum'",
        ),
        ({"scale_rewards": "Group"}, "scale_rewards must be 'group', 'batch', 'none', True or False, got 'Group'"),
        ({"norm_adv_by_std_in_grpo": "false"}, "norm_adv_by_std_in_grpo must be a bool (True or False), got str 'false'"),
        ({"role_column": ""}, "role_column must be a dataset column name (a non-empty str) or None, got str: ''"),
        ({"role_column": 3}, "role_column must be a dataset column name (a non-empty str) or None, got int: 3"),
        (
            {"adv_estimator_map": {"a:b": "rloo"}, "role_column": "role"},
            "adv_estimator_map key 'a:b': role 'a:b' contains ':', which separates task and role in rLLM group ids ('<task>:<role>'), "
            "so it would be read as the role 'a'; rename the role without ':' (e.g. 'a_b')",
        ),
    ],
)
def test_meaningless_combinations_and_bad_values_raise_at_construction(fields, message):
    with pytest.raises(ValueError) as info:
        RLLMGRPOConfig(**BASE, **fields)
    assert str(info.value) == message


def test_scale_rewards_in_the_estimator_kwargs_is_refused_for_the_config_field():
    with pytest.raises(ValueError) as info:
        RLLMGRPOConfig(**BASE, adv_estimator="trl_grpo", adv_estimator_kwargs={"scale_rewards": "batch"})
    assert str(info.value) == (
        "RLLMGRPOConfig.adv_estimator_kwargs: 'scale_rewards' is a GRPOConfig field; set scale_rewards instead (the estimators that take it receive it)"
    )


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


def test_passk_training_k_is_checked_against_num_generations_eval():
    """Evaluation groups have num_generations_eval completions: k=4 with groups of 2 would fail at the first evaluation."""
    config = RLLMGRPOConfig(**BASE, adv_estimator="passk_training", adv_estimator_kwargs={"k": 2}, num_generations=8, num_generations_eval=4)
    assert config.adv_estimator_kwargs == {"k": 2}
    with pytest.raises(ValueError, match=r"^adv_estimator with num_generations_eval=2: estimator 'passk_training': k=4 "):
        RLLMGRPOConfig(**BASE, adv_estimator="passk_training", adv_estimator_kwargs={"k": 4}, num_generations=8, num_generations_eval=2)


def test_passk_training_k_is_checked_against_num_generations():
    assert RLLMGRPOConfig(**BASE, adv_estimator="passk_training", adv_estimator_kwargs={"k": 4}, num_generations=8).adv_estimator_kwargs == {"k": 4}
    with pytest.raises(ValueError, match=r"adv_estimator with num_generations=8: estimator 'passk_training': k=8 equals the group size"):
        RLLMGRPOConfig(**BASE, adv_estimator="passk_training", adv_estimator_kwargs={"k": 8}, num_generations=8)
    with pytest.raises(ValueError, match=r"adv_estimator_map\['judge'\] with num_generations=8: .*k=9 is larger than the group size 8"):
        RLLMGRPOConfig(**BASE, adv_estimator_map={"judge": "passk_training"}, adv_estimator_kwargs={"k": 9}, role_column="role", num_generations=8)
    with pytest.raises(ValueError, match="option 'k' of estimator 'passk_training' must be an int, got str '4'"):
        RLLMGRPOConfig(**BASE, adv_estimator="passk_training", adv_estimator_kwargs={"k": "4"}, num_generations=8)


def test_each_estimator_name_is_resolved_once_per_config(monkeypatch):
    """Every config-time check (name, options, group size, level, keyword probe, dry run, trial) reads one resolution per name."""
    from rllm_plugins.discovery import manager

    looked_up: list[str] = []
    original = manager.user_estimator
    monkeypatch.setattr(manager, "user_estimator", lambda key: looked_up.append(key) or original(key))
    advantage_settings(
        SimpleNamespace(
            adv_estimator="trl_grpo",
            adv_estimator_map={"judge": "rloo", "critic": "trl_grpo"},
            role_column="role",
            adv_estimator_kwargs={"epsilon": 1e-4},
            num_generations=4,
            num_generations_eval=2,
            scale_rewards="batch",
        )
    )
    assert sorted(looked_up) == ["rloo", "trl_grpo"]


@pytest.mark.parametrize("fields", [{"adv_estimator": "turn_gae"}, {"adv_estimator_map": {"judge": "turn_gae"}, "role_column": "role"}])
def test_a_value_based_estimator_is_refused_at_config_time_because_grpo_trainer_has_no_critic(fields):
    with pytest.raises(ValueError, match=r"'turn_gae' is value-based: .*GRPOTrainer has no critic .*critic.enable=true"):
        RLLMGRPOConfig(**BASE, **fields)


def test_an_estimator_whose_loss_trl_does_not_apply_is_named_in_a_warning_at_config_time():
    with pytest.warns(UserWarning) as record:  # before: echo trained plain GRPO advantages without a word
        RLLMGRPOConfig(**BASE, adv_estimator="echo")
    assert [str(w.message) for w in record if "loss" in str(w.message)] == [
        "RLLMGRPOConfig: estimator 'echo': TRL's GRPOTrainer applies its own loss, not ECHO's auxiliary cross-entropy loss on "
        "environment-observation tokens (env_loss_coef); the run trains on the advantages of 'echo' without that term, which is not the "
        "whole method. Apply the term in your trainer's loss, or choose another estimator"
    ]


def test_an_option_typo_for_a_kwargs_estimator_is_refused_at_config_time():
    from rllm_plugins import register_rllm_adv_estimator, unregister_rllm_adv_estimator

    @register_rllm_adv_estimator("h_trim_trl")
    def trimmed(rewards, trim: float = 0.0, **kwargs):
        return [r - trim for r in rewards], [r - trim for r in rewards]

    try:
        typo = r"RLLMGRPOConfig\.adv_estimator_kwargs: unknown option 'trimm' for estimator 'h_trim_trl' .*Did you mean 'trim'\?"
        with pytest.raises(ValueError, match=typo):
            RLLMGRPOConfig(**BASE, adv_estimator="h_trim_trl", adv_estimator_kwargs={"trimm": 0.5})  # before: accepted, trim=0.0 used
        RLLMGRPOConfig(**BASE, adv_estimator="h_trim_trl", adv_estimator_kwargs={"trim": 0.5, "window": 3})
    finally:
        unregister_rllm_adv_estimator("h_trim_trl")
