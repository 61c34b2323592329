"""An rLLM user on the installed verl (0.7.1 and 0.8.0 with numpy 1 and transformers 4 in their cells) selects ``rllm_grpo`` and
``rllm_gigpo`` by name and gets verl's own numbers where the semantics coincide.

Where they coincide, written out (verl's ``grpo``: ``(r - mean) / (unbiased std + 1e-6)`` per uid, a uid of one row: mean 0, std 1):

- ``rllm_grpo`` with ``norm_adv_by_std_in_grpo=False``: ``r - mean`` per uid, ``r`` for a uid of one row, as verl's ``grpo``;
- ``rllm_gigpo`` on rows of one turn with ``std_ddof=1`` and ``step_advantage_w=0``: its episode part alone, verl's ``grpo``;
- the same with ``step_advantage_w=1`` and every uid of two rows or more: the step part (one anchor, the prompt, per uid; the
  return of one turn is its reward) is GRPO again, so twice verl's ``grpo``.

Both sides go through verl's own ``ray_trainer.compute_advantage``, the call its trainer makes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
from omegaconf import OmegaConf
from rllm_verl.tools.check import verl_check
from rllm_verl.versions import verl_features
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

LENGTH = 6


def random_rows(seed: int, smallest_group: int):
    """Shuffled rows of one turn each (``response_mask`` a prefix of 1-6 tokens), binary or continuous rewards on the last token."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(smallest_group, 9, 10)
    uids = np.repeat([f"prompt-{g}" for g in range(sizes.size)], sizes)
    rng.shuffle(uids)
    n = uids.size
    scores = rng.integers(0, 2, n).astype(np.float32) if seed % 2 else np.round(rng.normal(0.2, 1.3, n), 3).astype(np.float32)
    lengths = rng.integers(1, LENGTH + 1, n)
    mask = (torch.arange(LENGTH)[None, :] < torch.from_numpy(lengths)[:, None]).to(torch.int64)
    rewards = torch.zeros(n, LENGTH)
    rewards[torch.arange(n), torch.from_numpy(lengths - 1)] = torch.from_numpy(scores)
    responses = torch.from_numpy(rng.integers(0, 50, (n, LENGTH)))
    prompts = torch.tensor([[int(u.split("-")[1]), 7] for u in uids])  # one prompt per uid
    return rewards, mask, responses, prompts, uids


def advantages(name: str, rows, norm: bool = True, **options) -> np.ndarray:
    rewards, mask, responses, prompts, uids = rows
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask, "responses": responses, "prompts": prompts},
        non_tensors={"uid": uids.astype(object)},
    )
    config = OmegaConf.create({"adv_estimator": name, "gamma": 1.0, "lam": 1.0, "norm_adv_by_std_in_grpo": norm, "rllm_estimator_kwargs": options})
    OmegaConf.set_struct(config, True)
    out = compute_advantage(data, adv_estimator=name, norm_adv_by_std_in_grpo=norm, config=config)
    return out.batch["advantages"].to(torch.float64).numpy()


def verl_grpo_by_hand(rows, norm: bool = True) -> np.ndarray:
    """verl's GRPO written plainly: per uid, unbiased std, a uid of one row keeps mean 0 and std 1; times the mask."""
    rewards, mask, _, _, uids = rows
    scores = rewards.to(torch.float64).sum(-1).numpy()
    out = np.empty_like(scores)
    for uid in set(uids.tolist()):
        rows_of = np.flatnonzero(uids == uid)
        r = scores[rows_of]
        mean, std = (r.mean(), r.std(ddof=1)) if r.size > 1 else (0.0, 1.0)
        out[rows_of] = (r - mean) / (std + 1e-6) if norm else r - mean
    return out[:, None] * mask.numpy()


@pytest.mark.parametrize("seed", range(4))
def test_rllm_grpo_without_std_equals_verls_grpo(seed):
    rows = random_rows(seed, smallest_group=1)
    ours = advantages("rllm_grpo", rows, norm=False)
    np.testing.assert_allclose(ours, advantages("grpo", rows, norm=False), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ours, verl_grpo_by_hand(rows, norm=False), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_rllm_gigpo_on_one_turn_rows_with_unbiased_std_and_no_step_part_equals_verls_grpo(seed):
    rows = random_rows(seed, smallest_group=1)
    ours = advantages("rllm_gigpo", rows, std_ddof=1, step_advantage_w=0.0)
    np.testing.assert_allclose(ours, advantages("grpo", rows), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours, verl_grpo_by_hand(rows), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_rllm_gigpo_on_one_turn_rows_with_its_step_part_is_twice_verls_grpo(seed):
    rows = random_rows(seed, smallest_group=2)
    ours = advantages("rllm_gigpo", rows, std_ddof=1, step_advantage_w=1.0)
    np.testing.assert_allclose(ours, 2 * advantages("grpo", rows), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["rllm_grpo", "rllm_gigpo"])
def test_verl_check_accepts_the_name_and_says_how_it_is_registered_on_this_release(name):
    report = verl_check([f"algorithm.adv_estimator={name}"])
    assert report.ok, report.errors
    features = verl_features()
    mechanism = "verl.plugins entry point 'rllm_plugins'"
    if not features.entry_points:
        mechanism = "VERL_USE_EXTERNAL_MODULES (export VERL_USE_EXTERNAL_MODULES=rllm_verl.plugin)"
    assert report.registration.startswith(f"verl {features.version} ") and mechanism in report.registration and report.registration.endswith(": in place")
