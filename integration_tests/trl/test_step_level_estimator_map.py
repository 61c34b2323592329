"""A step-level estimator with ``adv_estimator_map``: the error names both ways out, for the estimator where it was set."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from rllm_trl.config import RLLMGRPOConfig


def refusal(tmp_path, **settings) -> str:
    with pytest.raises(ValueError) as caught:
        RLLMGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", role_column="role", **settings)
    return str(caught.value)


def test_gigpo_as_adv_estimator_with_a_map_says_drop_the_map_or_go_outcome_level(tmp_path):
    assert refusal(tmp_path, adv_estimator="gigpo", adv_estimator_map={"judge": "grpo"}) == (
        "adv_estimator='gigpo' is a step-level estimator (one advantage per turn), and TRL's step-level path runs one estimator for the "
        "whole batch, so adv_estimator_map {'judge': 'grpo'} cannot give roles their own: to train every role with 'gigpo', drop "
        "adv_estimator_map (role_column still splits the metrics by role); to keep an estimator per role, make adv_estimator and every "
        "value of adv_estimator_map outcome-level (e.g. 'grpo')"
    )


def test_gigpo_in_the_map_says_which_role_to_change_or_to_select_it_for_all(tmp_path):
    assert refusal(tmp_path, adv_estimator="grpo", adv_estimator_map={"judge": "gigpo"}) == (
        "adv_estimator_map['judge']='gigpo' is a step-level estimator (one advantage per turn), and TRL's step-level path runs one "
        "estimator for the whole batch, so adv_estimator_map {'judge': 'gigpo'} cannot give roles their own: to train every role with "
        "'gigpo', set adv_estimator='gigpo' and drop adv_estimator_map (role_column still splits the metrics by role); to keep an "
        "estimator per role, map 'judge' to an outcome-level estimator (e.g. 'grpo')"
    )


def test_either_fix_is_accepted(tmp_path):
    RLLMGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", role_column="role", adv_estimator="gigpo")
    RLLMGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", role_column="role", adv_estimator="grpo", adv_estimator_map={"judge": "rloo"})
