"""A TRL run says which estimator computes its advantages: one INFO line when the trainer is built."""

from __future__ import annotations

import logging

import pytest

LOGGER = "rllm_trl.trainer"


def info_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == LOGGER and record.levelno == logging.INFO]


def test_the_trainer_logs_the_estimator_its_provider_and_the_aggregation(make_trainer, caplog):
    with caplog.at_level(logging.INFO, logger=LOGGER):
        make_trainer(adv_estimator="rloo")
    assert info_lines(caplog) == [
        "RecordingRLLMGRPOTrainer: advantages by estimator 'rloo' (rllm-plugins (built-in)); "
        "multi_objective_aggregation='sum_then_normalize'; norm_adv_by_std_in_grpo=True"
    ]


def test_the_line_names_each_roles_estimator_the_options_and_the_trl_settings_followed(make_trainer, caplog):
    with caplog.at_level(logging.INFO, logger=LOGGER), pytest.warns(UserWarning, match="overridden by adv_estimator 'median_baseline'"):
        make_trainer(
            adv_estimator="trl_grpo",
            role_column="role",
            adv_estimator_map={"judge": "median_baseline"},
            remove_unused_columns=False,
            scale_rewards="batch",
            multi_objective_aggregation="sum_then_normalize",
        )
    (line,) = info_lines(caplog)
    assert line.startswith("RecordingRLLMGRPOTrainer: advantages by estimator 'trl_grpo' (rllm-plugins (built-in)), ")
    assert "role 'judge': 'median_baseline' (plugin 'median_baseline' (distribution rllm-median-baseline 0.1.0))" in line
    assert line.endswith("; scale_rewards='batch'")


def test_the_options_given_to_the_estimator_are_in_the_line(make_trainer, caplog):
    with caplog.at_level(logging.INFO, logger=LOGGER):
        make_trainer(adv_estimator="passk_training", adv_estimator_kwargs={"k": 2}, multi_objective_aggregation="normalize_then_sum")
    (line,) = info_lines(caplog)
    assert "'passk_training'" in line and "multi_objective_aggregation='normalize_then_sum'" in line and "adv_estimator_kwargs={'k': 2}" in line
