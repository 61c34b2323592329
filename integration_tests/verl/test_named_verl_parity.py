"""``rllm_verl_grpo``, ``rllm_verl_rloo_vectorized``, ``rllm_verl_reinforce_plus_plus_baseline`` and ``rllm_gpg`` equal verl's own (gpg: no padding uid).

Random batches (groups of 1 to 8 rows in shuffled order, uneven response lengths including empty
responses, binary and continuous rewards) go through verl's ``core_algos`` functions and through
verl's ``compute_advantage`` under both names; the token-level advantages agree to 1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.trainer.ppo.ray_trainer import compute_advantage

TOL = 1e-6
RESPONSE_LENGTH = 9
# our name -> verl's name, verl's function
PAIRS = {
    "verl_grpo": ("grpo", core_algos.compute_grpo_outcome_advantage),
    "verl_rloo_vectorized": ("rloo_vectorized", core_algos.compute_rloo_vectorized_outcome_advantage),
    "verl_reinforce_plus_plus_baseline": ("reinforce_plus_plus_baseline", core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage),
    "gpg": ("gpg", core_algos.compute_gpg_outcome_advantage),
}


def random_batch(ref, seed: int, binary: bool, padding_groups: bool = True):
    """``padding_groups=False``: every uid has a row with a response token (no uid is padding, which ``rllm_gpg`` leaves out)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 9, 12)
    uids = np.repeat([f"p{g}" for g in range(sizes.size)], sizes)
    rng.shuffle(uids)
    n = uids.size
    rewards = rng.integers(0, 2, n).astype(float) if binary else np.round(rng.normal(0.3, 1.5, n), 4)
    lengths = rng.integers(0, RESPONSE_LENGTH + 1, n)
    lengths[0] = max(lengths[0], 2)  # at least two response tokens in the batch, as verl's whitening needs
    if not padding_groups:
        _, first = np.unique(uids, return_index=True)
        lengths[first] = np.maximum(lengths[first], 1)
    return ref.make_batch(rewards.tolist(), lengths.tolist(), uids.tolist(), response_length=RESPONSE_LENGTH)


@pytest.mark.parametrize("name", sorted(PAIRS))
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, TOL), (torch.float64, 1e-7)])
def test_the_bridge_equals_verls_function(ref, algorithm_config, name, seed, binary, dtype, tol):
    """float32 rewards: verl's own rounding bounds the agreement. float64 rewards: verl computes in float64 but mixes
    in float32 numbers (a group of one's ``torch.tensor(1.0) + eps``, gpg's ``alpha = bsz / count_nonzero``, the
    whitening's ``mask.sum() / (mask.sum() - 1)``), so the agreement is float32's relative 1e-7."""
    data = random_batch(ref, seed, binary, padding_groups=name != "gpg")
    rewards = data.batch["token_level_rewards"].to(dtype)
    kwargs = {"token_level_rewards": rewards, "response_mask": data.batch["response_mask"], "index": data.non_tensor_batch["uid"]}
    theirs, _ = PAIRS[name][1](**{**kwargs, "token_level_rewards": rewards.clone()}, config=algorithm_config())
    ours, _ = get_adv_estimator_fn(f"rllm_{name}")(**kwargs, config=algorithm_config())
    assert ours.dtype == theirs.dtype == dtype
    torch.testing.assert_close(ours, theirs, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", sorted(PAIRS))
@pytest.mark.parametrize("norm", [True, False])
def test_compute_advantage_gives_the_same_numbers_under_both_names(ref, algorithm_config, name, norm):
    """verl's trainer entry point: the hard-coded ``grpo`` reads the keyword, registry estimators read ``config``."""
    for seed in range(3):
        config = algorithm_config(norm_adv_by_std_in_grpo=norm)
        batch = {"seed": seed, "binary": seed % 2 == 0, "padding_groups": name != "gpg"}
        ours = compute_advantage(random_batch(ref, **batch), adv_estimator=f"rllm_{name}", norm_adv_by_std_in_grpo=norm, config=config)
        theirs = compute_advantage(random_batch(ref, **batch), adv_estimator=PAIRS[name][0], norm_adv_by_std_in_grpo=norm, config=config)
        torch.testing.assert_close(ours.batch["advantages"], theirs.batch["advantages"], rtol=TOL, atol=TOL)
        torch.testing.assert_close(ours.batch["returns"], theirs.batch["returns"], rtol=TOL, atol=TOL)


def test_verl_grpo_also_equals_grpo_vectorized(ref, algorithm_config):
    data = random_batch(ref, 5, binary=False)
    kwargs = {"token_level_rewards": data.batch["token_level_rewards"], "response_mask": data.batch["response_mask"], "index": data.non_tensor_batch["uid"]}
    theirs, _ = core_algos.compute_grpo_vectorized_outcome_advantage(**kwargs)
    ours, _ = get_adv_estimator_fn("rllm_verl_grpo")(**kwargs, config=algorithm_config())
    torch.testing.assert_close(ours, theirs, rtol=TOL, atol=TOL)


def test_the_group_of_one_rules_are_verls(ref, algorithm_config):
    """A single-row uid: grpo keeps r / (1 + eps), rloo_vectorized gives 0, gpg gives alpha * r (alpha = 3 rows / 2 non-zero)."""
    data = ref.make_batch([1.0, 0.0, 3.0], [2, 2, 2], ["a", "a", "solo"])
    kwargs = {"token_level_rewards": data.batch["token_level_rewards"], "response_mask": data.batch["response_mask"], "index": data.non_tensor_batch["uid"]}
    expected = {"verl_grpo": 3.0 / (1 + 1e-6), "verl_rloo_vectorized": 0.0, "gpg": 4.5}
    for name, value in expected.items():
        ours, _ = get_adv_estimator_fn(f"rllm_{name}")(**kwargs, config=algorithm_config())
        theirs, _ = PAIRS[name][1](**kwargs)
        np.testing.assert_allclose(ours[2, :2].numpy(), [value, value], rtol=1e-6)
        torch.testing.assert_close(ours, theirs, rtol=TOL, atol=TOL)


def test_rllm_gpg_leaves_out_padding_where_verls_gpg_counts_it(ref, algorithm_config):
    """The declared difference: a uid without response tokens (verl v1's padding) is in verl's ``alpha = bsz / count_nonzero``, not ours."""
    real = ref.make_batch([1.0, 0.0, 2.0, 0.0], [3, 2, 4, 1], ["a", "a", "b", "b"])
    padded = ref.make_batch([1.0, 0.0, 2.0, 0.0, 0.0, 0.0], [3, 2, 4, 1, 0, 0], ["a", "a", "b", "b", "pad_0", "pad_1"])

    def gpg(data, fn):
        kwargs = {"token_level_rewards": data.batch["token_level_rewards"], "response_mask": data.batch["response_mask"], "index": data.non_tensor_batch["uid"]}
        return fn(**kwargs, config=algorithm_config())[0]

    ours = gpg(padded, get_adv_estimator_fn("rllm_gpg"))
    torch.testing.assert_close(ours[:4], gpg(real, core_algos.compute_gpg_outcome_advantage), rtol=TOL, atol=TOL)  # alpha = 4 / 2
    assert torch.count_nonzero(ours[4:]) == 0
    theirs = gpg(padded, core_algos.compute_gpg_outcome_advantage)  # alpha = 6 / 2
    torch.testing.assert_close(theirs[:4], 1.5 * ours[:4], rtol=TOL, atol=TOL)
