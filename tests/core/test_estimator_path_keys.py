"""Every key the estimator path reads is read from the algorithm node, and a key is never suggested as its own typo.

Before, ``stepwise_advantage_mode`` in the node was refused with "Did you mean 'stepwise_advantage_mode'?": it was
listed among the keys whose near misses are typos, but not among the keys the node is read for.
"""

from __future__ import annotations

import re
import warnings

import pytest

from rllm_plugins import AlgorithmConfig
from rllm_plugins.trainer_fields import ESTIMATOR_PATH_KEYS, TrainerFieldWarning, split_trainer_fields

VALID = {
    "adv_estimator": "rloo",
    "norm_adv_by_std_in_grpo": False,
    "use_precomputed_advantage": True,
    "estimator_map": {"solver": "rloo"},
    "estimator_kwargs": {"epsilon": 1e-4},
    "multi_objective_aggregation": "normalize_then_sum",
    "reward_weights": {"accuracy": 2.0},
    "pass_at_k": 2,
    "stepwise_advantage_mode": "per_step",
}
FIELD = {"adv_estimator": "estimator"}


def test_the_valid_values_cover_every_estimator_path_key():
    assert set(VALID) == set(ESTIMATOR_PATH_KEYS)


@pytest.mark.parametrize("key", ESTIMATOR_PATH_KEYS)
def test_every_estimator_path_key_in_the_node_is_read_into_its_field(key):
    config = AlgorithmConfig.from_config({key: VALID[key]})
    assert getattr(config, FIELD.get(key, key)) == VALID[key]
    assert config.trainer_fields == {}


@pytest.mark.parametrize("key", ESTIMATOR_PATH_KEYS)
def test_a_key_the_node_does_not_know_is_never_suggested_as_its_own_typo(key):
    known = [k for k in ESTIMATOR_PATH_KEYS if k != key]  # as if this version did not read it
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TrainerFieldWarning)  # kept for the trainer: said, not refused
            split_trainer_fields({key: 1}, known, "node")
    except ValueError as error:
        assert f"Did you mean {key!r}" not in str(error)
        assert re.search(r"Did you mean '(\w+)'", str(error)).group(1) in known


def test_stepwise_advantage_mode_in_the_node_and_in_its_section_must_agree():
    both = {"rllm": {"algorithm": {"stepwise_advantage_mode": "broadcast"}, "stepwise_advantage": {"mode": "per_step"}}}
    with pytest.raises(ValueError, match=r"rllm\.algorithm\.stepwise_advantage_mode='broadcast' and rllm\.stepwise_advantage\.mode='per_step' disagree"):
        AlgorithmConfig.from_config(both)
    agreeing = {"rllm": {"algorithm": {"stepwise_advantage_mode": "per_step"}, "stepwise_advantage": {"mode": "per_step"}}}
    assert AlgorithmConfig.from_config(agreeing).stepwise_advantage_mode == "per_step"
    with pytest.raises(ValueError, match=r"stepwise_advantage_mode='broadcast' but the config says 'per_step'"):
        AlgorithmConfig.from_config({"stepwise_advantage_mode": "per_step"}, stepwise_advantage_mode="broadcast")
