"""``RLLMGRPOTrainer`` checks at construction what would fail, or go unnoticed, at the first step (real trainers)."""

from __future__ import annotations

import pytest
from datasets import Dataset
from trl import GRPOConfig


def test_a_role_column_missing_from_the_dataset_fails_when_the_trainer_is_built(make_trainer):
    # before: a KeyError-like ValueError only inside the first training step
    dataset = Dataset.from_dict({"prompt": ["a", "b", "c", "d"]})
    with pytest.raises(ValueError) as error:
        make_trainer(dataset=dataset, adv_estimator_map={"judge": "rloo"}, role_column="role")
    assert str(error.value) == "role_column='role' is not a column of train_dataset (columns: ['prompt'])"


def test_a_plain_grpo_config_warns_that_rllm_grpo_replaces_scale_rewards(tmp_path, tokenizer, prompt_dataset):
    from rllm_trl import RLLMGRPOTrainer
    from rllm_trl.tiny import build_tiny_model

    from .conftest import reward_length, reward_letter_a, training_args

    args = training_args(tmp_path, GRPOConfig)
    with pytest.warns(UserWarning, match=r"GRPOConfig has no rLLM settings: advantages come from rLLM's 'grpo' .* not TRL's scale_rewards="):
        RLLMGRPOTrainer(
            model=build_tiny_model(tokenizer, seed=0),
            reward_funcs=[reward_length, reward_letter_a],
            args=args,
            train_dataset=prompt_dataset,
            processing_class=tokenizer,
        )
