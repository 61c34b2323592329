"""What would fail only at the first training step fails when ``RLLMGRPOTrainer`` is built."""

from __future__ import annotations

from typing import Any

import pytest
from datasets import Dataset
from rllm_trl import RLLMGRPOConfig, RLLMGRPOTrainer
from trl import GRPOConfig

from rllm_plugins.tiny import build_tiny_model

PROMPTS = ["1+1=", "2+3=", "the cat", "a b c"]


@pytest.fixture
def build(tokenizer, make_config, default_reward_funcs, tmp_path):
    """``build(train_dataset, eval_dataset=None, config_class=RLLMGRPOConfig, **fields)``: a real trainer."""

    def make(train_dataset: Dataset, eval_dataset: Any = None, config_class: type = RLLMGRPOConfig, **fields: Any) -> RLLMGRPOTrainer:
        args = fields.pop("args", None) or make_config(tmp_path, config_class, **fields)
        return RLLMGRPOTrainer(
            model=build_tiny_model(tokenizer, seed=0),
            reward_funcs=default_reward_funcs,
            args=args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=tokenizer,
        )

    return make


def with_roles(roles: list[Any]) -> Dataset:
    return Dataset.from_dict({"prompt": PROMPTS, "role": roles})


def test_a_role_column_missing_from_the_train_dataset_raises(build):
    with pytest.raises(ValueError) as info:
        build(with_roles(["a", "b", "a", "b"]), role_column="team")
    assert str(info.value) == (
        "role_column='team' is not a column of train_dataset (columns: ['prompt', 'role']); add it, or set role_column to the column naming each prompt's role"
    )


def test_a_role_column_missing_from_an_eval_dataset_raises_naming_it(build):
    eval_datasets = {"held_out": Dataset.from_dict({"prompt": PROMPTS})}
    with pytest.raises(ValueError) as info:
        build(with_roles(["a", "b", "a", "b"]), eval_datasets, role_column="role")
    assert str(info.value).startswith("role_column='role' is not a column of eval_dataset['held_out'] (columns: ['prompt'])")


@pytest.mark.parametrize(
    ("roles", "message"),
    [
        (["a", None, "a", "b"], "role_column='role' of train_dataset: role is None; every prompt needs a role name (fill in the role column)"),
        (["a", "", "a", "b"], "role_column='role' of train_dataset: role is the empty string; every prompt needs a role name (fill in the role column)"),
        (
            ["a", "gsm8k:judge", "a", "b"],
            "role_column='role' of train_dataset: role 'gsm8k:judge' contains ':', which separates task and role in rLLM group ids "
            "('<task>:<role>'), so it would be read as the role 'gsm8k'; rename the role without ':' (e.g. 'gsm8k_judge')",
        ),
    ],
)
def test_role_values_that_are_no_role_names_raise(build, roles, message):
    with pytest.raises(ValueError) as info:
        build(with_roles(roles), role_column="role")
    assert str(info.value) == message


def test_a_role_column_of_lists_raises(build):
    with pytest.raises(ValueError, match=r"role_column='role' of train_dataset holds List\(.*\); a role is one name per prompt \(str\)"):
        build(with_roles([["a"], ["b"], ["a"], ["b"]]), role_column="role")


def test_remove_unused_columns_would_drop_the_role_column(build):
    with pytest.raises(ValueError) as info:
        build(with_roles(["a", "b", "a", "b"]), role_column="role", remove_unused_columns=True)
    assert str(info.value) == "remove_unused_columns=True drops role_column='role' before the rewards are computed; set remove_unused_columns=False"


def test_options_changed_after_the_config_are_checked_again(build, make_config, tmp_path):
    args = make_config(tmp_path, RLLMGRPOConfig)
    args.adv_estimator_kwargs = {"epsilon": "1e-4"}
    with pytest.raises(ValueError) as info:
        build(with_roles(["a", "b", "a", "b"]), args=args)
    assert str(info.value) == "RLLMGRPOConfig.adv_estimator_kwargs: option 'epsilon' of estimator 'grpo' must be a number >= 0, got str '1e-4'"


def test_a_plain_grpo_config_follows_trl_and_says_nothing(build, recwarn):
    trainer = build(with_roles(["a", "b", "a", "b"]), config_class=GRPOConfig, scale_rewards="none")
    settings = trainer.advantage_settings
    assert (settings.estimator, settings.trl_settings, settings.overridden) == ("trl_grpo", {"scale_rewards": "none"}, ())
    assert not [w for w in recwarn if "RLLMGRPOConfig" in str(w.message)]


def test_a_plain_grpo_config_with_normalize_then_sum_follows_trls_gdpo_where_scale_rewards_has_no_effect(build, recwarn):
    trainer = build(with_roles(["a", "b", "a", "b"]), config_class=GRPOConfig, multi_objective_aggregation="normalize_then_sum", scale_rewards="batch")
    settings = trainer.advantage_settings
    assert (settings.estimator, settings.aggregation, settings.trl_settings, settings.overridden) == ("trl_grpo", "normalize_then_sum", {}, ())
    assert not [w for w in recwarn if "RLLMGRPOConfig" in str(w.message)]


def test_a_role_of_none_at_a_step_raises_instead_of_becoming_the_role_none(build):
    """Datasets whose values are not known at build time (here: examples given to the step) are checked per batch."""
    trainer = build(with_roles(["a", "b", "a", "b"]), role_column="role")
    inputs = [{"prompt": p, "role": role} for p, role in zip(PROMPTS[:2], ["a", None], strict=True) for _ in range(4)]
    with pytest.raises(ValueError) as info:
        trainer._generate_and_score_completions(inputs)
    assert str(info.value) == "role_column='role', completion 4 of the gathered batch: role is None; every prompt needs a role name (fill in the role column)"


def test_an_example_without_the_role_column_at_a_step_raises_naming_the_columns(build):
    trainer = build(with_roles(["a", "b", "a", "b"]), role_column="role")
    inputs = [{"prompt": p} for p in PROMPTS[:2] for _ in range(4)]
    with pytest.raises(ValueError) as info:
        trainer._generate_and_score_completions(inputs)
    assert str(info.value) == "role_column='role': completion 0 of the gathered batch has no such column (columns: ['prompt'])"


def test_a_step_level_estimator_with_a_state_and_a_dataset_of_two_roles_is_refused_when_the_trainer_is_built(build):
    """Before: refused only at the first training step, though the trainer knows the dataset's roles when it is built."""
    terms = [["gigpo", 0.5], ["rae", 0.5]]
    with pytest.raises(ValueError) as info:
        build(with_roles(["a", "b", "a", "b"]), role_column="role", adv_estimator="composite", adv_estimator_kwargs={"terms": terms})
    assert str(info.value) == (
        "adv_estimator='composite' keeps a state per role, and role_column='role' of train_dataset holds the roles ['a', 'b'], "
        "which the step-level path computes in one call: drop role_column, or the stateful term"
    )
    build(with_roles(["a", "a", "a", "a"]), role_column="role", adv_estimator="composite", adv_estimator_kwargs={"terms": terms})  # one role
    build(with_roles(["a", "b", "a", "b"]), role_column="role", adv_estimator="composite", adv_estimator_kwargs={"terms": [["gigpo", 0.5], ["grpo", 0.5]]})
