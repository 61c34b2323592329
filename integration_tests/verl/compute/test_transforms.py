"""``+algorithm.rllm_advantage_transforms`` through verl's real ``ray_trainer.compute_advantage``, for verl's own estimators too.

References are written plainly: verl's GRPO (unbiased std + 1e-6) per uid with a loop, verl's GAE with a backward
loop, SkyRL's ``A_t += coef (mean KL - KL_t)`` over the batch's model tokens.
"""

from __future__ import annotations

import contextlib
import math
from collections import defaultdict

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
import rllm_verl.plugin  # noqa: F401 - installs the extensions, as verl's entry point does
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo import ray_trainer

WIDTH = 5


def batch(rewards, lengths, uids, *, seed=0, log_probs=False):
    n = len(rewards)
    mask = torch.zeros(n, WIDTH, dtype=torch.int64)
    token_rewards = torch.zeros(n, WIDTH)
    for row, (r, k) in enumerate(zip(rewards, lengths, strict=True)):
        mask[row, :k] = 1
        token_rewards[row, k - 1] = r
    tensors = {
        "token_level_rewards": token_rewards,
        "token_level_scores": token_rewards.clone(),
        "response_mask": mask,
        "values": torch.linspace(-1, 1, n * WIDTH).reshape(n, WIDTH),
        "prompts": torch.zeros(n, 2, dtype=torch.int64),
        "responses": torch.zeros(n, WIDTH, dtype=torch.int64),
        "prompt_length": torch.full((n,), 2.0),
        "response_length": mask.sum(-1).float(),
    }
    if log_probs:
        gen = torch.Generator().manual_seed(seed)
        tensors["old_log_probs"] = -torch.rand(n, WIDTH, generator=gen) * 2
        tensors["ref_log_prob"] = -torch.rand(n, WIDTH, generator=gen) * 2
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": np.array(uids, dtype=object)})


def algorithm(transforms, **extra):
    return OmegaConf.create({"gamma": 1.0, "lam": 1.0, "norm_adv_by_std_in_grpo": True, "rllm_advantage_transforms": transforms, **extra})


def verl_grpo_by_hand(rewards, uids):
    rows = defaultdict(list)
    for i, u in enumerate(uids):
        rows[u].append(i)
    out = [0.0] * len(rewards)
    for members in rows.values():
        values = [rewards[i] for i in members]
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 1.0
        for i in members:
            out[i] = (rewards[i] - mean) / (std + 1e-6) if len(values) > 1 else 0.0
    return out


REWARDS, LENGTHS, UIDS = [1.0, 0.0, 0.0, 1.0, 0.5, 2.0, 0.0], [5, 3, 1, 4, 2, 5, 3], ["b", "a", "b", "a", "b", "c", "c"]


def test_verls_own_grpo_then_clip_and_scale_per_row_with_metrics_in_the_legacy_logs():
    data = batch(REWARDS, LENGTHS, UIDS)
    config = algorithm([{"name": "clip", "min": -0.8, "max": 0.8}, ["scale", {"negative": 0.5}]])
    out = ray_trainer.compute_advantage(data, "grpo", config=config)
    per_row = [min(0.8, max(-0.8, a)) for a in verl_grpo_by_hand(REWARDS, UIDS)]
    per_row = [a * 0.5 if a < 0 else a for a in per_row]
    mask = out.batch["response_mask"].numpy()
    np.testing.assert_allclose(out.batch["advantages"].numpy(), np.array(per_row)[:, None] * mask, rtol=0, atol=1e-6)
    assert out.batch["advantages"].dtype == torch.float32
    metrics = ray_trainer.compute_data_metrics(batch=out, use_critic=False)  # the name the legacy fit loop calls
    assert metrics["rllm/transform/all_groups/scale/min"] == pytest.approx(min(per_row), abs=1e-6)
    assert metrics["rllm/transform/all_groups/clip/fraction_changed"] == pytest.approx(np.mean([abs(a) > 0.8 for a in verl_grpo_by_hand(REWARDS, UIDS)]))


def test_a_group_transform_sees_rows_grouped_by_uid_in_order_of_first_appearance():
    from rllm_plugins.transforms import register_advantage_transform, unregister_advantage_transform

    seen = {}

    @register_advantage_transform("test_verl_groups")
    def groups(advantages, *, offsets, rewards, lengths):
        seen.update(offsets=offsets.tolist(), rewards=rewards.tolist(), lengths=lengths.tolist())
        return advantages

    try:
        ray_trainer.compute_advantage(batch(REWARDS, LENGTHS, UIDS), "rloo", config=algorithm(["test_verl_groups"]))
        # uids b (rows 0, 2, 4), a (rows 1, 3), c (rows 5, 6)
        assert seen == {"offsets": [0, 3, 5, 7], "rewards": [1.0, 0.0, 0.5, 0.0, 1.0, 2.0, 0.0], "lengths": [5.0, 1.0, 2.0, 3.0, 4.0, 5.0, 3.0]}
    finally:
        unregister_advantage_transform("test_verl_groups")


def test_gae_advantages_are_per_token_clip_applies_token_by_token_and_a_row_transform_is_refused():
    data = batch(REWARDS, LENGTHS, UIDS)
    plain = ray_trainer.compute_advantage(batch(REWARDS, LENGTHS, UIDS), "gae", config=algorithm([]))
    out = ray_trainer.compute_advantage(data, "gae", config=algorithm([{"name": "clip", "max": 0.1}]))
    mask = out.batch["response_mask"].numpy()
    np.testing.assert_allclose(out.batch["advantages"].numpy(), np.minimum(plain.batch["advantages"].numpy(), 0.1) * mask, rtol=0, atol=1e-7)

    from rllm_plugins.transforms import register_advantage_transform, unregister_advantage_transform

    @register_advantage_transform("test_verl_rows")
    def rows(advantages):
        return advantages - advantages.mean()

    try:
        with pytest.raises(ValueError, match=r"advantage transform 'test_verl_rows' .* these advantages differ token by token"):
            ray_trainer.compute_advantage(batch(REWARDS, LENGTHS, UIDS), "gae", config=algorithm(["test_verl_rows"]))
    finally:
        unregister_advantage_transform("test_verl_rows")


def test_kl_shaping_reads_verls_old_and_reference_log_probs():
    data = batch(REWARDS, LENGTHS, UIDS, log_probs=True)
    logp, ref = data.batch["old_log_probs"].double().numpy(), data.batch["ref_log_prob"].double().numpy()
    out = ray_trainer.compute_advantage(data, "grpo", config=algorithm([{"name": "kl_shaping", "coef": 0.2}]))
    mask = out.batch["response_mask"].numpy().astype(bool)
    kl = logp - ref
    mean = kl[mask].sum() / mask.sum()
    base = np.array(verl_grpo_by_hand(REWARDS, UIDS))[:, None] * mask
    want = np.where(mask, base + 0.2 * (mean - kl), 0.0)
    np.testing.assert_allclose(out.batch["advantages"].numpy(), want, rtol=0, atol=1e-6)
    without_ref = batch(REWARDS, LENGTHS, UIDS)
    with pytest.raises(ValueError, match=r"advantage transform 'kl_shaping' .* needs \['logprobs', 'ref_logprobs'\], which this path does not provide"):
        ray_trainer.compute_advantage(without_ref, "grpo", config=algorithm(["kl_shaping"]))


def test_an_unknown_name_or_option_in_the_algorithm_section_is_a_value_error_naming_the_key():
    with pytest.raises(ValueError, match=r"algorithm.rllm_advantage_transforms\[0\]: advantage transform 'clip' .* has no option\(s\) \['top'\]"):
        ray_trainer.compute_advantage(batch(REWARDS, LENGTHS, UIDS), "grpo", config=algorithm([{"name": "clip", "top": 1.0}]))
    with pytest.raises(ValueError, match=r"algorithm.rllm_advantage_transforms\[0\]: Unknown advantage transform 'sclae'. Did you mean 'scale'\?"):
        ray_trainer.compute_advantage(batch(REWARDS, LENGTHS, UIDS), "grpo", config=algorithm(["sclae"]))


def test_without_transforms_verls_numbers_are_untouched():
    plain = ray_trainer.compute_advantage(batch(REWARDS, LENGTHS, UIDS), "grpo", config=OmegaConf.create({"norm_adv_by_std_in_grpo": True}))
    mask = plain.batch["response_mask"].numpy()
    np.testing.assert_allclose(plain.batch["advantages"].numpy(), np.array(verl_grpo_by_hand(REWARDS, UIDS))[:, None] * mask, rtol=0, atol=1e-6)
    assert "rllm_transform_metrics" not in plain.meta_info


def test_codapo_after_verls_grpo_reads_the_rows_old_log_probs():
    data = batch(REWARDS, LENGTHS, UIDS, log_probs=True)
    logp = data.batch["old_log_probs"].double().numpy()
    out = ray_trainer.compute_advantage(data, "grpo", config=algorithm([{"name": "codapo", "weight_offset": 0.1}]))
    grpo = verl_grpo_by_hand(REWARDS, UIDS)
    rows = defaultdict(list)
    for i, u in enumerate(UIDS):
        rows[u].append(i)
    want = [0.0] * len(REWARDS)
    for members in rows.values():
        accuracy = sum(REWARDS[i] == 1.0 for i in members) / len(members)
        confidence = math.exp(sum(logp[i, : LENGTHS[i]].mean() for i in members) / len(members))
        for i in members:
            want[i] = grpo[i] * (confidence * 4 * accuracy * (1 - accuracy) + 0.1)
    mask = out.batch["response_mask"].numpy()
    np.testing.assert_allclose(out.batch["advantages"].numpy(), np.array(want)[:, None] * mask, rtol=0, atol=1e-6)


# codapo under algorithm.use_kl_in_reward=True: verl's token_level_rewards are token_level_scores - beta * KL


KL_REWARDS, KL_LENGTHS, KL_UIDS = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0], [3, 4, 2, 5, 3, 3, 4, 2], ["a", "a", "a", "a", "b", "b", "b", "b"]


def penalised(seed=1):
    """A batch whose token_level_rewards verl's own apply_kl_penalty made from its token_level_scores (beta 0.05, k1)."""
    from verl.trainer.ppo.core_algos import FixedKLController

    data = batch(KL_REWARDS, KL_LENGTHS, KL_UIDS, seed=seed, log_probs=True)
    data, _ = ray_trainer.apply_kl_penalty(data, kl_ctrl=FixedKLController(kl_coef=0.05), kl_penalty="kl")
    return data


def plain_codapo_factors(correct_by_row, logp, lengths, uids, offset):
    """CoDaPO's factor per row, written plainly: per uid, a = share correct, c = exp(mean of the rows' mean log-probs)."""
    factors = [0.0] * len(uids)
    for uid in dict.fromkeys(uids):
        members = [i for i, u in enumerate(uids) if u == uid]
        a = sum(correct_by_row[i] for i in members) / len(members)
        c = math.exp(sum(sum(logp[i][: lengths[i]]) / lengths[i] for i in members) / len(members))
        for i in members:
            factors[i] = c * 4 * a * (1 - a) + offset
    return factors


@pytest.mark.parametrize("estimator", ["grpo", "rllm_grpo"])
def test_codapo_counts_correct_answers_on_the_task_scores_not_on_the_kl_penalised_rewards(estimator):
    """Before: codapo read the penalised rewards, found no reward equal to 1.0, and scaled every advantage by weight_offset alone."""
    data = penalised()
    scores = data.batch["token_level_scores"].double().sum(-1).tolist()
    rewards = data.batch["token_level_rewards"].double().sum(-1).tolist()
    assert scores == KL_REWARDS and all(abs(r - 1.0) > 1e-3 for r in rewards), "the penalty moved every correct answer's reward off 1.0"
    config = {"use_kl_in_reward": True, "kl_penalty": "kl"}
    plain = ray_trainer.compute_advantage(penalised(), estimator, config=algorithm([], **config)).batch["advantages"].double().numpy()
    out = ray_trainer.compute_advantage(data, estimator, config=algorithm([{"name": "codapo", "weight_offset": 0.1}], **config))
    got = out.batch["advantages"].double().numpy()
    first = [0] * len(KL_UIDS)  # every row's first token is a model token
    factors = [got[i, first[i]] / plain[i, first[i]] for i in range(len(KL_UIDS))]
    logp = data.batch["old_log_probs"].double().tolist()
    from_scores = plain_codapo_factors([s == 1.0 for s in scores], logp, KL_LENGTHS, KL_UIDS, 0.1)
    from_rewards = plain_codapo_factors([r == 1.0 for r in rewards], logp, KL_LENGTHS, KL_UIDS, 0.1)
    np.testing.assert_allclose(factors, from_scores, rtol=1e-5)
    assert from_rewards == [0.1] * len(KL_UIDS) and min(from_scores) > 0.3, (from_scores, from_rewards)


def test_codapo_on_a_verl_batch_without_token_level_scores_is_refused_naming_scores():
    data = batch(KL_REWARDS, KL_LENGTHS, KL_UIDS, log_probs=True)
    data.batch.pop("token_level_scores")
    with pytest.raises(ValueError, match=r"advantage transform 'codapo' .* needs \['scores'\], which this path does not provide"):
        ray_trainer.compute_advantage(data, "grpo", config=algorithm(["codapo"]))


@pytest.mark.parametrize(("estimator", "units"), [("grpo", "rows"), ("rllm_rloo", "rows"), ("rllm_step_reinforce", "turns")])
def test_a_transform_reading_scores_gets_the_summed_token_level_scores_on_every_verl_path(estimator, units):
    """verl's own estimators, an rllm_* outcome name, an rllm_* step-level name (one turn per row here): scores are the
    task's, rewards the penalised ones."""
    from rllm_plugins import register_advantage_transform
    from rllm_plugins.transforms import unregister_advantage_transform

    seen = []

    @register_advantage_transform("test_scores_seen", requires=("scores",))
    def scores_seen(advantages, *, scores, rewards):
        seen.append((scores.tolist(), rewards.tolist()))
        return advantages.copy()

    try:
        data = penalised()
        penalty = data.batch["token_level_rewards"].double().sum(-1).tolist()
        with pytest.warns(UserWarning) if units == "turns" else contextlib.nullcontext():  # a single turn per episode: warned
            ray_trainer.compute_advantage(data, estimator, config=algorithm(["test_scores_seen"], use_kl_in_reward=True))
        (scores, rewards), by_uid = seen[-1], sorted(range(len(KL_UIDS)), key=lambda i: KL_UIDS[i])  # seen[0]: the config-time trial
        assert scores == [KL_REWARDS[i] for i in by_uid]
        np.testing.assert_allclose(rewards, [penalty[i] for i in by_uid], rtol=1e-6)
    finally:
        unregister_advantage_transform("test_scores_seen")
