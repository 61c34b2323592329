"""``RLLMGRPOConfig(advantage_transforms=...)`` with TRL's real ``GRPOTrainer`` on a tiny local model.

The reference is the core estimator on the gathered rewards (the shared ``expected_advantages``), then the transform
written plainly; the metrics are read from TRL's own ``_metrics``.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

G = 4


def clip_scale_by_hand(values, low, high, negative):
    clipped = [min(high, max(low, v)) for v in values]
    return [v * negative if v < 0 else v for v in clipped]


def test_outcome_advantages_are_clipped_and_scaled_and_the_metrics_reach_trls_logs(make_trainer, expected_advantages):
    trainer = make_trainer(adv_estimator="grpo", advantage_transforms=[("clip", {"min": -0.7, "max": 0.9}), {"name": "scale", "negative": 0.5}], max_steps=1)
    trainer.train()
    (record,) = [r for r in trainer.records if r["mode"] == "train"][:1]
    plain = expected_advantages(record["rewards_per_func"], [1.0, 0.5], G, "grpo")
    want = clip_scale_by_hand(plain.tolist(), -0.7, 0.9, 0.5)
    assert record["advantages"].numpy() == pytest.approx(np.array(want), abs=1e-6)
    logged = trainer.state.log_history[0]
    assert logged["transform/all_groups/scale/min"] == pytest.approx(min(want), abs=1e-6)
    assert logged["transform/all_groups/clip/fraction_changed"] == pytest.approx(np.mean([v < -0.7 or v > 0.9 for v in plain]))
    assert logged["advantage/all_groups/max"] == pytest.approx(max(want), abs=1e-6)


def test_kl_shaping_needs_the_reference_model(make_trainer):
    with pytest.raises(ValueError, match=re.escape("RLLMGRPOConfig.advantage_transforms: 'kl_shaping' works on per-token advantages")):
        make_trainer(advantage_transforms=["kl_shaping"])


def test_kl_shaping_on_this_process_rows_with_trls_log_probs(tokenizer, prompt_dataset, make_config, default_reward_funcs, expected_advantages, tmp_path):
    from rllm_trl import RLLMGRPOTrainer

    from rllm_plugins.tiny import build_tiny_model

    model = build_tiny_model(tokenizer, seed=0)
    build_tiny_model(tokenizer, seed=1).save_pretrained(tmp_path / "reference")  # GRPOTrainer builds the reference from the policy's path
    model.config._name_or_path = str(tmp_path / "reference")  # when beta > 0: another model there, so the KL is not 0
    config = make_config(tmp_path, advantage_transforms=[{"name": "kl_shaping", "coef": 0.5}], beta=0.1, num_iterations=2, max_steps=1)
    trainer = RLLMGRPOTrainer(model=model, reward_funcs=default_reward_funcs, args=config, train_dataset=prompt_dataset, processing_class=tokenizer)
    seen = []
    original = trainer._token_transforms

    def spy(output, token_part, batch):
        before = output["advantages"].double().numpy().copy()
        metrics = original(output, token_part, batch)
        seen.append(
            {
                "before": before,
                "after": output["advantages"].double().numpy(),
                "mask": output["completion_mask"].double().numpy(),
                "logp": output["old_per_token_logps"].double().numpy(),
                "ref": output["ref_per_token_logps"].double().numpy(),
                "metrics": metrics,
            }
        )
        return metrics

    trainer._token_transforms = spy
    trainer.train()
    step = seen[0]
    mask = step["mask"].astype(bool)
    kl = step["logp"] - step["ref"]
    assert np.abs(kl[mask]).max() > 1e-3, "the policy is its reference: the shaping would change nothing"
    mean = kl[mask].sum() / mask.sum()
    want = np.where(mask, step["before"][:, None] + 0.5 * (mean - kl), 0.0)
    np.testing.assert_allclose(step["after"], want, rtol=0, atol=1e-5)
    assert step["metrics"]["transform/all_groups/kl_shaping/mean"] == pytest.approx(float(want[mask].mean()), abs=1e-5)
    assert abs(float((step["after"] - step["before"][:, None])[mask].sum())) < 1e-4  # zero-sum over the batch's model tokens


def test_step_level_advantages_are_transformed_per_turn(make_trainer):
    plain = make_trainer(adv_estimator="step_reinforce", max_steps=1)
    plain.train()
    trainer = make_trainer(adv_estimator="step_reinforce", advantage_transforms=[{"name": "clip", "max": 0.25}], max_steps=1)
    trainer.train()  # built and trained after the plain run, from the same seed: the same completions
    first = next(r for r in plain.records if r["mode"] == "train")["rewards_per_func"]
    assert next(r for r in trainer.records if r["mode"] == "train")["rewards_per_func"].equal(first)
    got = next(r for r in trainer.records if r["mode"] == "train")["advantages"].numpy()
    base = next(r for r in plain.records if r["mode"] == "train")["advantages"].numpy()
    assert got == pytest.approx(np.minimum(base, 0.25), abs=1e-6)  # same seed, same completions: the one difference is the clip


def test_bad_entries_fail_when_the_config_is_built(make_config, tmp_path):
    from rllm_trl import RLLMGRPOConfig

    with pytest.raises(ValueError, match=re.escape("RLLMGRPOConfig.advantage_transforms[0]: Unknown advantage transform 'clipp'. Did you mean 'clip'?")):
        make_config(tmp_path, RLLMGRPOConfig, advantage_transforms=["clipp"])
    message = "advantage transform 'scale' (rllm-plugins (built-in)) has no option(s) ['pos']; its options: positive, negative"
    with pytest.raises(ValueError, match=re.escape(message)):
        make_config(tmp_path, RLLMGRPOConfig, advantage_transforms='[{"name": "scale", "pos": 2}]')


def test_codapo_is_refused_at_config_time_naming_what_trl_lacks(make_config, tmp_path):
    from rllm_trl import RLLMGRPOConfig

    with pytest.raises(ValueError, match=re.escape("RLLMGRPOConfig.advantage_transforms: advantage transform 'codapo' needs ['mean_logprobs'], which TRL")):
        make_config(tmp_path, RLLMGRPOConfig, advantage_transforms=["codapo"])


def test_the_object_path_with_the_configs_algorithm_config_agrees_with_the_trainers_path(make_config, tmp_path):
    import torch
    from rllm_trl import RLLMGRPOConfig
    from rllm_trl.outcome import compute_advantages, compute_advantages_via_groups, prepare_batch
    from rllm_trl.transforms import sequence_transforms

    config = make_config(tmp_path, RLLMGRPOConfig, adv_estimator="rloo", advantage_transforms=[{"name": "clip", "min": -0.3}, ["scale", {"positive": 2.0}]])
    rng = np.random.default_rng(3)
    rewards = torch.from_numpy(rng.integers(0, 4, size=(8 * G, 1)).astype(np.float32))
    batch = prepare_batch(rewards, torch.tensor([1.0]), G)
    fast = compute_advantages(batch, "rloo", transforms=sequence_transforms(_selected(config))[0])
    slow, metrics = compute_advantages_via_groups(batch, [[1, 2]] * (8 * G), [[7, 7]] * (8 * G), config.algorithm_config())
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-6)
    assert metrics["transform/all_groups/scale/max"] == pytest.approx(fast.max(), abs=1e-6)


def _selected(config):
    from rllm_trl.config import advantage_settings

    return advantage_settings(config).transforms


def test_a_transform_requiring_scores_is_accepted_and_gets_trls_rewards_on_both_aggregations(make_config, tmp_path):
    """TRL subtracts nothing from a reward (its KL term is in the loss): the task scores are the gathered rewards."""
    import torch
    from rllm_trl import RLLMGRPOConfig
    from rllm_trl.outcome import compute_advantages, prepare_batch
    from rllm_trl.transforms import sequence_transforms

    from rllm_plugins import register_advantage_transform
    from rllm_plugins.transforms import unregister_advantage_transform

    seen = []

    @register_advantage_transform("test_scores_seen", requires=("scores",))
    def scores_seen(advantages, *, scores, rewards):
        seen.append((scores.tolist(), rewards.tolist()))
        return advantages.copy()

    try:
        config = make_config(tmp_path, RLLMGRPOConfig, advantage_transforms=["test_scores_seen"])
        rewards = torch.tensor([[1.0, 0.5], [0.0, 0.5], [1.0, 0.0], [0.0, 1.0]] * 2)
        batch = prepare_batch(rewards, torch.tensor([1.0, 0.5]), G)
        for aggregation in ("sum_then_normalize", "normalize_then_sum"):
            compute_advantages(batch, "grpo", aggregation=aggregation, transforms=sequence_transforms(_selected(config))[0])
            scores, given = seen.pop()
            assert scores == given == batch.rewards.tolist() == [1.25, 0.25, 1.0, 0.5] * 2, aggregation
    finally:
        unregister_advantage_transform("test_scores_seen")
