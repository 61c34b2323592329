"""``+algorithm.rllm_advantage_transforms`` through verl's real ``ray_trainer.compute_advantage``, for verl's own estimators too.

References are written plainly: verl's GRPO (unbiased std + 1e-6) per uid with a loop, verl's GAE with a backward
loop, SkyRL's ``A_t += coef (mean KL - KL_t)`` over the batch's model tokens.
"""

from __future__ import annotations

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
