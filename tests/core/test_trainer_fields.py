"""The rule for algorithm-node keys this version does not know: the trainer's are kept and said once, typos refused."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig
from rllm_plugins.trainer_fields import TrainerFieldWarning


def test_a_field_only_the_trainer_reads_is_kept_and_said_once():
    node = {"adv_estimator": "grpo", "kl_approx": "k3", "entropy_coeff_schedule": {"start": 0.01}}
    said = r"the algorithm config: kl_approx, entropy_coeff_schedule not read by rllm-plugins: rLLM.s trainer.s"
    with pytest.warns(TrainerFieldWarning, match=said) as caught:
        config = AlgorithmConfig.from_config(node)
    assert len(caught) == 1
    assert config.trainer_fields == {"kl_approx": "k3", "entropy_coeff_schedule": {"start": 0.01}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second time: silent
        assert AlgorithmConfig.from_config(node).trainer_fields == config.trainer_fields


def test_an_unknown_rollout_correction_key_is_the_trainers_too():
    with pytest.warns(TrainerFieldWarning, match=r"rllm\.algorithm\.rollout_correction: tis_floor, icepop_beta not read"):
        config = AlgorithmConfig.from_config({"rllm": {"algorithm": {"rollout_correction": {"tis_floor": 0.5, "icepop_beta": 3.0}}}})
    assert config.rollout_correction.extra == {"icepop_beta": 3.0, "tis_floor": 0.5}


@pytest.mark.parametrize(
    "key, closest",
    [
        ("estimator_kwarg", "estimator_kwargs"),
        ("estimator_maps", "estimator_map"),
        ("norm_adv_by_std_in_gpro", "norm_adv_by_std_in_grpo"),
        ("reward_weight", "reward_weights"),
        ("pass_k", "pass_at_k"),
        ("adv_estimators", "adv_estimator"),
        ("use_precomputed_advantages", "use_precomputed_advantage"),
    ],
)
def test_a_near_miss_of_an_estimator_path_key_is_refused_with_the_closest_name(key, closest):
    with pytest.raises(ValueError, match=rf"the algorithm config: unknown key\(s\) \['{key}'\]\. Did you mean '{closest}'\?"):
        AlgorithmConfig.from_config({"adv_estimator": "grpo", key: {"k": 2}})


def test_verls_own_algorithm_section_is_refused_by_its_keys():
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['gamma', 'kl_ctrl'\]: these are verl's `algorithm` section"):
        AlgorithmConfig.from_config({"adv_estimator": "grpo", "gamma": 1.0, "kl_ctrl": {"kl_coef": 0.001}})


def test_trainer_fields_through_the_constructor_must_be_a_mapping():
    assert AlgorithmConfig(trainer_fields={"kl_approx": "k3"}).trainer_fields == {"kl_approx": "k3"}
    with pytest.raises(ValueError, match=r"AlgorithmConfig\.trainer_fields must be a mapping"):
        AlgorithmConfig(trainer_fields=["kl_approx"])


# --- ECHO's coefficient: the older field and terminal-rl's loss_params.env_loss_coef ---


@pytest.mark.parametrize(
    "kwargs, coef",
    [
        ({"estimator": "echo"}, 0.05),
        ({"estimator": "grpo"}, 0.0),
        ({"estimator": "echo", "loss_params": {"env_loss_coef": 0.2}}, 0.2),
        ({"estimator": "echo", "env_loss_coef": 0.3}, 0.3),
        ({"estimator": "echo", "env_loss_coef": 0.2, "loss_params": {"env_loss_coef": 0.2}}, 0.2),
        ({"estimator": "grpo", "loss_params": {"env_loss_coef": np.float32(0.5), "other": 1}}, 0.5),
    ],
)
def test_echo_coefficient_comes_from_either_place(kwargs, coef):
    assert AlgorithmConfig(**kwargs).env_loss_coef == coef


def test_echo_coefficients_that_disagree_are_an_error():
    with pytest.raises(ValueError, match=r"env_loss_coef=0\.1 but loss_params\['env_loss_coef'\]=0\.2; set it in one place"):
        AlgorithmConfig(estimator="echo", env_loss_coef=0.1, loss_params={"env_loss_coef": 0.2})


@pytest.mark.parametrize("bad", ["0.1", True, float("nan")])
def test_echo_coefficient_must_be_a_finite_number(bad):
    with pytest.raises(ValueError, match="ECHO's env_loss_coef must be a finite number"):
        AlgorithmConfig(estimator="echo", loss_params={"env_loss_coef": bad})


@pytest.mark.parametrize("bad", [None, "k=2", [("env_loss_coef", 0.1)]])
def test_loss_params_must_be_a_mapping(bad):
    with pytest.raises(ValueError, match=r"AlgorithmConfig\.loss_params must be a mapping"):
        AlgorithmConfig(loss_params=bad)


def test_token_sum_is_one_of_rllms_loss_agg_modes():
    assert AlgorithmConfig(loss_agg_mode="token-sum").loss_agg_mode == "token-sum"
    assert AlgorithmConfig.from_config({"loss_agg_mode": "token-sum"}).loss_agg_mode == "token-sum"


# --- pass_at_k (rLLM PR #743) ---


def test_pass_at_k_is_read_from_the_node():
    assert AlgorithmConfig.from_config({"adv_estimator": "pkpo", "pass_at_k": 4}).pass_at_k == 4
    assert AlgorithmConfig.from_config({"adv_estimator": "pkpo"}).pass_at_k is None


@pytest.mark.parametrize("bad", [0, -1, 2.0, "2", True])
def test_pass_at_k_must_be_an_int_of_at_least_one(bad):
    with pytest.raises(ValueError, match=r"AlgorithmConfig\.pass_at_k must be an int >= 1"):
        AlgorithmConfig(pass_at_k=bad)


def test_pass_at_k_and_option_k_must_agree():
    assert AlgorithmConfig(pass_at_k=np.int64(3), estimator_kwargs={"k": 3}).pass_at_k == 3
    with pytest.raises(ValueError, match=r"pass_at_k=2 but estimator_kwargs\['k'\]=4; set k in one place"):
        AlgorithmConfig(pass_at_k=2, estimator_kwargs={"k": 4})
