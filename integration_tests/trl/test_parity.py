"""Parity with TRL's own GRPO advantages.

First on the rewards a stock GRPOTrainer gathered (the estimators alone), then end to end: one real
``_generate_and_score_completions`` step of a stock ``GRPOTrainer`` and of ``RLLMGRPOTrainer`` with
``adv_estimator="trl_grpo"`` (or a plain ``GRPOConfig``), same model, seed and completions, for each
TRL advantage setting.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np
import pytest
import torch
from datasets import Dataset
from rllm_trl import RLLMGRPOConfig, RLLMGRPOTrainer, compute_advantages, prepare_batch
from trl import GRPOConfig, GRPOTrainer

from rllm_plugins.tiny import build_tiny_model

UNSCORABLE = {1, 4, 5, 6, 7}  # row 1: a group mixing scorable and unscorable rows; rows 4-7: a whole group


def length_or_none(completions: list[str], **_: Any) -> list[float | None]:
    return [None if i in UNSCORABLE else len(c) / 8.0 for i, c in enumerate(completions)]


def letter_a_or_none(completions: list[str], **_: Any) -> list[float | None]:
    return [None if i in UNSCORABLE or i == 2 else float(c.count("a")) for i, c in enumerate(completions)]


def length(completions: list[str], **_: Any) -> list[float]:
    return [len(c) / 8.0 for c in completions]


def letter_a(completions: list[str], **_: Any) -> list[float]:
    return [float(c.count("a")) for c in completions]


def distinct_letters(completions: list[str], **_: Any) -> list[float]:
    return [float(len(set(c))) for c in completions]


def letter_a_none_in_group_0(completions: list[str], **_: Any) -> list[float | None]:
    """None for the whole first group (rows 0-3), the other function still scoring it."""
    return [None if i < G else float(c.count("a")) for i, c in enumerate(completions)]


def length_int(completions: list[str], **_: Any) -> list[int]:
    return [len(c) for c in completions]


def has_a_bool(completions: list[str], **_: Any) -> list[bool]:
    return ["a" in c for c in completions]


def length_numpy(completions: list[str], **_: Any) -> list[np.float32]:
    return [np.float32(len(c)) / np.float32(3) for c in completions]


@pytest.mark.parametrize(
    ("scale_rewards", "estimator", "norm"),
    [("group", "trl_grpo", True), ("batch", "trl_grpo_batch", True), ("none", "trl_grpo", False)],
)
def test_trl_estimators_reproduce_grpo_trainer_advantages(make_trainer, scale_rewards, estimator, norm):
    trainer = make_trainer(stock=True, reward_funcs=[length_or_none, letter_a_or_none], scale_rewards=scale_rewards, max_steps=1)
    trainer.train()

    record = trainer.records[0]
    batch = prepare_batch(record["rewards_per_func"], trainer.reward_weights, trainer.num_generations)
    ours = compute_advantages(batch, estimator, norm_adv_by_std_in_grpo=norm)
    trl_advantages = record["advantages"].double().numpy()
    assert np.isnan(record["rewards_per_func"].numpy()[sorted(UNSCORABLE)]).all()
    np.testing.assert_allclose(ours, trl_advantages, rtol=0, atol=2e-6)
    assert np.abs(trl_advantages).max() > 0


# --- end to end: stock GRPOTrainer vs RLLMGRPOTrainer on one generation step ---------------------------------

G = 4


def _step(trainer: Any, dataset: Dataset, mode: str, num_generations: int) -> dict[str, Any]:
    """One real ``_generate_and_score_completions`` on the first prompts (16 completions at most), seed 0."""
    rows = dataset.select(range(min(len(dataset), 16 // num_generations)))
    inputs = [dict(example) for example in rows for _ in range(num_generations)]
    trainer.model.train(mode == "train")
    torch.manual_seed(0)
    return trainer._generate_and_score_completions(inputs)


@pytest.fixture
def both_steps(tokenizer, prompt_dataset, make_config, default_reward_funcs, tmp_path):
    """``both_steps(case, rllm_config=RLLMGRPOConfig, **rllm_fields)``: (stock output, rLLM output, rLLM trainer)
    of one step on the same completions; ``case`` holds GRPOConfig fields plus ``reward_funcs`` and ``mode``."""

    def build(trainer_class: type, config_class: type, name: str, reward_funcs: list[Any], **fields: Any) -> Any:
        args = make_config(tmp_path / name, config_class, per_device_train_batch_size=16, per_device_eval_batch_size=16, max_steps=1, **fields)
        model = build_tiny_model(tokenizer, seed=0)
        return trainer_class(model=model, reward_funcs=reward_funcs, args=args, train_dataset=prompt_dataset, processing_class=tokenizer)

    def run(case: dict[str, Any], rllm_config: type = RLLMGRPOConfig, **rllm_fields: Any) -> tuple[dict[str, Any], dict[str, Any], Any]:
        case = dict(case)
        reward_funcs = case.pop("reward_funcs", default_reward_funcs)
        mode = case.pop("mode", "train")
        num_generations = (case.get("num_generations_eval") or G) if mode == "eval" else G
        stock = build(GRPOTrainer, GRPOConfig, "stock", reward_funcs, **case)
        ours = build(RLLMGRPOTrainer, rllm_config, "ours", reward_funcs, **case, **rllm_fields)
        stock_out = _step(stock, prompt_dataset, mode, num_generations)
        ours_out = _step(ours, prompt_dataset, mode, num_generations)
        assert torch.equal(stock_out["completion_ids"], ours_out["completion_ids"]), "the two trainers did not generate the same completions"
        return stock_out, ours_out, ours

    run.build = build
    return run


PARITY_CASES = {
    "group": {"scale_rewards": "group"},
    "batch": {"scale_rewards": "batch"},
    "none": {"scale_rewards": "none"},
    "True": {"scale_rewards": True},
    "False": {"scale_rewards": False},
    "weights-group": {"reward_weights": [2.0, -0.75]},
    "weights-batch": {"reward_weights": [2.0, -0.75], "scale_rewards": "batch"},
    "None-rewards-group": {"reward_funcs": [length_or_none, letter_a_or_none]},
    "None-rewards-batch": {"reward_funcs": [length_or_none, letter_a_or_none], "scale_rewards": "batch"},
    "None-rewards-none": {"reward_funcs": [length_or_none, letter_a_or_none], "scale_rewards": "none"},
    "three-functions-batch": {"reward_funcs": [length, letter_a, distinct_letters], "reward_weights": [1.0, 0.5, -0.25], "scale_rewards": "batch"},
    "eval-2-group": {"mode": "eval", "num_generations_eval": 2},
    "eval-2-batch": {"mode": "eval", "num_generations_eval": 2, "scale_rewards": "batch"},
    "eval-1-group": {"mode": "eval", "num_generations_eval": 1},
    "eval-default": {"mode": "eval"},
    "int-bool-numpy-rewards": {"reward_funcs": [length_int, has_a_bool, length_numpy], "reward_weights": [1.0, 2.0, -1.0]},
}


@pytest.mark.parametrize("case", PARITY_CASES.values(), ids=PARITY_CASES.keys())
def test_trl_grpo_gives_grpo_trainer_advantages_for_each_trl_setting(both_steps, case):
    stock_out, ours_out, ours = both_steps(case, adv_estimator="trl_grpo")

    expected = stock_out["advantages"].double().numpy()
    np.testing.assert_allclose(ours_out["advantages"].double().numpy(), expected, rtol=0, atol=1e-6)
    np.testing.assert_allclose(ours.last_advantages, expected, rtol=0, atol=1e-6)
    if case.get("num_generations_eval") != 1:  # TRL gives 0 to groups of one
        assert np.abs(expected).max() > 0.1, "no learning signal: the comparison would show nothing"


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_a_plain_grpo_config_gives_grpo_trainer_advantages(both_steps, scale_rewards):
    stock_out, ours_out, ours = both_steps({"scale_rewards": scale_rewards}, rllm_config=GRPOConfig)

    assert ours.advantage_settings.estimator == "trl_grpo"
    np.testing.assert_allclose(ours_out["advantages"].double().numpy(), stock_out["advantages"].double().numpy(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("scale_rewards", ["group", "none"])
def test_roles_keep_grpo_trainer_advantages_where_statistics_are_per_group(both_steps, scale_rewards):
    stock_out, ours_out, ours = both_steps({"scale_rewards": scale_rewards}, adv_estimator="trl_grpo", role_column="role")

    assert ours.last_reward_batch.roles == ("solver", "judge")

    np.testing.assert_allclose(ours_out["advantages"].double().numpy(), stock_out["advantages"].double().numpy(), rtol=0, atol=1e-6)


def test_the_settings_give_different_advantages_on_the_same_completions(both_steps, prompt_dataset, default_reward_funcs):
    """The parity cases can fail: group, batch and none differ by far more than the tolerance here."""
    outputs = {}
    for mode in ("group", "batch", "none"):
        stock = both_steps.build(GRPOTrainer, GRPOConfig, mode, default_reward_funcs, scale_rewards=mode)
        outputs[mode] = _step(stock, prompt_dataset, "train", G)["advantages"].double().numpy()
    for a, b in (("group", "batch"), ("group", "none"), ("batch", "none")):
        assert np.abs(outputs[a] - outputs[b]).max() > 0.05, (a, b)


def test_another_estimator_overrides_scale_rewards_and_says_so(both_steps):
    with pytest.warns(UserWarning, match=r"scale_rewards='batch' is overridden by adv_estimator 'grpo'"):
        stock_out, ours_out, _ = both_steps({"scale_rewards": "batch"}, adv_estimator="grpo")
    assert np.abs(ours_out["advantages"].double().numpy() - stock_out["advantages"].double().numpy()).max() > 0.05


@pytest.mark.parametrize(
    "case",
    [
        {},
        {"reward_funcs": [length_or_none, letter_a_or_none]},
        {"mode": "eval", "num_generations_eval": 2},
        {"scale_rewards": "batch"},  # TRL's GDPO path ignores scale_rewards; so does trl_grpo there
        {"mode": "eval", "num_generations_eval": 1},
        {"reward_funcs": [length, letter_a_none_in_group_0]},
        {"reward_funcs": [length, letter_a, distinct_letters], "reward_weights": [0.0, -1.0, 0.5]},
        {"reward_funcs": [length_int, has_a_bool, length_numpy], "reward_weights": [1.0, 2.0, -1.0]},
    ],
)
def test_trl_grpo_gives_grpo_trainer_advantages_with_normalize_then_sum(both_steps, case):
    case = {"reward_weights": [2.0, -0.75], **case, "multi_objective_aggregation": "normalize_then_sum"}
    stock_out, ours_out, _ = both_steps(case, adv_estimator="trl_grpo")

    np.testing.assert_allclose(ours_out["advantages"].double().numpy(), stock_out["advantages"].double().numpy(), rtol=0, atol=1e-6)


def trl_gdpo_by_hand(table: np.ndarray, weights: list[float], group: int) -> np.ndarray:
    """TRL's GDPO written out: per function and group (x - mean) / (sample std + 1e-4) over the present values
    (0 for a group of one), the weighted sum, then (s - mean) / (sample std + 1e-4) over the scorable rows."""
    n, total = table.shape[0], [0.0] * table.shape[0]
    for f, weight in enumerate(weights):
        for start in range(0, n, group):
            keep = [i for i in range(start, start + group) if not math.isnan(table[i, f])]
            values = [float(table[i, f]) for i in keep]
            std = statistics.stdev(values) if len(values) > 1 else math.inf
            for i, v in zip(keep, values, strict=True):
                total[i] += weight * (v - statistics.fmean(values)) / (std + 1e-4)
    scorable = [i for i in range(n) if not np.isnan(table[i]).all()]
    mean, std = statistics.fmean(total[i] for i in scorable), statistics.stdev(total[i] for i in scorable)
    out = np.zeros(n)
    for i in scorable:
        out[i] = (total[i] - mean) / (std + 1e-4)
    return out


def test_trl_grpo_with_normalize_then_sum_and_roles_whitens_each_role_over_its_own_rows(both_steps):
    """With role_column the final whitening is per role (TRL has no roles: it whitens the whole batch)."""
    case = {"multi_objective_aggregation": "normalize_then_sum", "reward_weights": [2.0, -0.75]}
    stock_out, ours_out, ours = both_steps(case, adv_estimator="trl_grpo", role_column="role")

    batch = ours.last_reward_batch
    table = batch.rewards_per_func
    np.testing.assert_allclose(trl_gdpo_by_hand(table, [2.0, -0.75], G), stock_out["advantages"].double().numpy(), rtol=0, atol=1e-6)
    expected = np.zeros(table.shape[0])
    for r in range(len(batch.roles)):
        rows = np.flatnonzero(np.repeat(batch.group_roles == r, G))
        expected[rows] = trl_gdpo_by_hand(table[rows], [2.0, -0.75], G)
    assert batch.roles == ("solver", "judge")
    np.testing.assert_allclose(ours_out["advantages"].double().numpy(), expected, rtol=0, atol=1e-6)
    assert np.abs(expected - stock_out["advantages"].double().numpy()).max() > 1e-3


def test_trl_grpo_with_batch_scaling_and_roles_divides_by_the_std_of_each_roles_rows(both_steps):
    """scale_rewards="batch" with role_column: group mean, sample std of the role's rows + 1e-4 (TRL: of the whole batch)."""
    stock_out, ours_out, ours = both_steps({"scale_rewards": "batch"}, adv_estimator="trl_grpo", role_column="role")

    batch = ours.last_reward_batch
    rewards = batch.rewards.tolist()
    expected = [0.0] * len(rewards)
    for r in range(len(batch.roles)):
        groups = [g for g in range(batch.num_groups) if batch.group_roles[g] == r]
        std = statistics.stdev(rewards[i] for g in groups for i in range(G * g, G * g + G))
        for g in groups:
            mean = statistics.fmean(rewards[G * g : G * g + G])
            for i in range(G * g, G * g + G):
                expected[i] = (rewards[i] - mean) / (std + 1e-4)
    assert batch.roles == ("solver", "judge")
    np.testing.assert_allclose(ours_out["advantages"].double().numpy(), expected, rtol=0, atol=1e-6)
    assert np.abs(np.asarray(expected) - stock_out["advantages"].double().numpy()).max() > 1e-3


@pytest.mark.parametrize("scale_rewards", ["group", "batch"])
def test_steps_per_generation_the_statistics_cover_one_whole_generation(make_trainer, scale_rewards):
    """steps_per_generation=2: one generation of 16 completions scored at once, as stock TRL does."""
    fields = {"steps_per_generation": 2, "scale_rewards": scale_rewards, "max_steps": 1}
    stock = make_trainer(stock=True, **fields)
    stock.train()
    ours = make_trainer(adv_estimator="trl_grpo", **fields)  # built after the stock run: the same seed, the same completions
    ours.train()

    theirs, used = stock.records[0], ours.records[0]
    assert theirs["rewards_per_func"].shape == (16, 2) and torch.equal(theirs["rewards_per_func"], used["rewards_per_func"])
    np.testing.assert_allclose(used["advantages"].double().numpy(), theirs["advantages"].double().numpy(), rtol=0, atol=1e-6)
    assert ours.last_advantages.size == 16 and np.abs(ours.last_advantages).max() > 0.1
