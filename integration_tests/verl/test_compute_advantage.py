"""verl's own ``compute_advantage`` with ``rllm_*`` names gives the rLLM values broadcast over ``response_mask``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.trainer.ppo.ray_trainer import compute_advantage

# uneven lengths, a group of one ("solo"), several groups, interleaved rows, a row with no response token
REWARDS = [1.0, 0.0, 0.5, 1.0, 3.0, 0.0, 0.0, 2.0, 1.0]
LENGTHS = [7, 3, 5, 1, 4, 6, 2, 0, 7]
UIDS = ["a", "a", "b", "a", "solo", "b", "b", "c", "c"]


def _run(ref, config, name, rewards=REWARDS, lengths=LENGTHS, uids=UIDS):
    """As verl's trainer calls it: the hard-coded ``grpo`` reads the keyword, registry estimators read ``config``."""
    data = ref.make_batch(rewards, lengths, uids)
    out = compute_advantage(data, adv_estimator=name, norm_adv_by_std_in_grpo=config.get("norm_adv_by_std_in_grpo", True), config=config)
    return out, data.batch["response_mask"]


@pytest.mark.parametrize(
    ("name", "per_group_fn"),
    [
        ("rllm_grpo", lambda r: (r - r.mean()) / (r.std() + 1e-6) if r.size > 1 else r / (1 + 1e-6)),
        ("rllm_rloo", lambda r: np.array([r[i] - np.delete(r, i).mean() for i in range(r.size)]) if r.size > 1 else r),
        ("rllm_reinforce", lambda r: r),
        ("rllm_median_baseline", lambda r: r - np.median(r)),
    ],
)
def test_matches_the_formula_broadcast_over_the_mask(ref, algorithm_config, name, per_group_fn):
    out, mask = _run(ref, algorithm_config(), name)
    expected = ref.broadcast(ref.per_group(np.array(REWARDS), UIDS, per_group_fn), mask)
    np.testing.assert_allclose(out.batch["advantages"].numpy(), expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(out.batch["returns"].numpy(), out.batch["advantages"].numpy())
    assert (out.batch["advantages"][mask == 0] == 0).all()


def test_reinforce_plus_plus_baseline_whitens_per_trajectory_over_all_rows(ref, algorithm_config):
    out, mask = _run(ref, algorithm_config(), "rllm_reinforce_plus_plus_baseline")
    centred = ref.per_group(np.array(REWARDS), UIDS, lambda r: r - r.mean() if r.size > 1 else r)
    expected = (centred - centred.mean()) / (centred.std() + 1e-6)
    np.testing.assert_allclose(out.batch["advantages"].numpy(), ref.broadcast(expected, mask), rtol=1e-6, atol=1e-6)


def test_opo_weights_the_baseline_by_response_length_from_the_mask(ref, algorithm_config):
    out, mask = _run(ref, algorithm_config(), "rllm_opo")
    lengths = np.array(LENGTHS, dtype=np.float64)
    expected = np.empty(len(REWARDS))
    for uid in set(UIDS):
        rows = [i for i, u in enumerate(UIDS) if u == uid]
        r, w = np.array(REWARDS)[rows], lengths[rows]
        expected[rows] = r - (np.dot(w, r) / w.sum() if len(rows) > 1 else 0.0)
    np.testing.assert_allclose(out.batch["advantages"].numpy(), ref.broadcast(expected, mask), rtol=1e-6, atol=1e-6)


def test_rllm_rloo_equals_verls_rloo(ref, algorithm_config):
    ours, _ = _run(ref, algorithm_config(), "rllm_rloo")
    theirs, _ = _run(ref, algorithm_config(), "rloo")
    torch.testing.assert_close(ours.batch["advantages"], theirs.batch["advantages"], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("norm", [True, False])
def test_rllm_grpo_equals_verls_grpo_after_the_ddof_correction(ref, algorithm_config, norm):
    """verl divides by the sample std (ddof=1) + eps, rLLM by the population std (ddof=0) + eps."""
    ours, _ = _run(ref, algorithm_config(norm_adv_by_std_in_grpo=norm), "rllm_grpo")
    theirs, _ = _run(ref, algorithm_config(norm_adv_by_std_in_grpo=norm), "grpo", rewards=REWARDS)
    rewards = np.array(REWARDS)
    if norm:
        scale = ref.per_group(rewards, UIDS, lambda r: np.full(r.size, (r.std(ddof=1) + 1e-6) / (r.std() + 1e-6) if r.size > 1 else 1.0))
    else:
        scale = np.ones(len(REWARDS))
    np.testing.assert_allclose(ours.batch["advantages"].numpy(), theirs.batch["advantages"].numpy() * scale[:, None], rtol=1e-5, atol=1e-6)


def test_two_rewards_give_plus_minus_one_where_verl_gives_0707(ref, algorithm_config):
    ours, _ = _run(ref, algorithm_config(), "rllm_grpo", rewards=[1.0, 0.0], lengths=[1, 1], uids=["p", "p"])
    theirs, _ = _run(ref, algorithm_config(), "grpo", rewards=[1.0, 0.0], lengths=[1, 1], uids=["p", "p"])
    np.testing.assert_allclose(ours.batch["advantages"][:, 0].numpy(), [1.0, -1.0], atol=1e-5)
    np.testing.assert_allclose(theirs.batch["advantages"][:, 0].numpy(), [0.7071, -0.7071], atol=1e-4)


def test_norm_adv_by_std_in_grpo_and_epsilon_come_from_the_algorithm_config(ref, algorithm_config):
    rewards = np.array(REWARDS)
    out, mask = _run(ref, algorithm_config(norm_adv_by_std_in_grpo=False), "rllm_grpo")
    np.testing.assert_allclose(out.batch["advantages"].numpy(), ref.broadcast(ref.per_group(rewards, UIDS, lambda r: ref.grpo(r, norm=False)), mask), atol=1e-6)
    out, mask = _run(ref, algorithm_config(rllm_estimator_kwargs={"epsilon": 0.5}), "rllm_grpo")
    np.testing.assert_allclose(out.batch["advantages"].numpy(), ref.broadcast(ref.per_group(rewards, UIDS, lambda r: ref.grpo(r, eps=0.5)), mask), atol=1e-6)


def test_uids_group_by_exact_value(ref, algorithm_config):
    """ "1" and "01" are two prompts; rows of one prompt need not be adjacent."""
    out, _ = _run(ref, algorithm_config(), "rllm_rloo", rewards=[1.0, 0.0, 5.0, 2.0], lengths=[1, 1, 1, 1], uids=["1", "01", "1", "01"])
    np.testing.assert_allclose(out.batch["advantages"][:, 0].numpy(), [-4.0, -2.0, 4.0, 2.0])


def test_dtype_and_device_follow_token_level_rewards():
    fn = get_adv_estimator_fn("rllm_grpo")
    index = np.array(["x", "x", "y"], dtype=object)
    for dtype in (torch.float64, torch.bfloat16):
        rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0], [2.0, 0.0]], dtype=dtype)
        advantages, returns = fn(token_level_rewards=rewards, response_mask=torch.ones(3, 2, dtype=torch.bool), index=index, config=None)
        assert advantages.dtype == dtype and advantages.device == rewards.device and returns is advantages
    advantages, _ = fn(token_level_rewards=torch.tensor([[1], [0], [2]]), response_mask=torch.ones(3, 1), index=index)
    assert advantages.dtype == torch.get_default_dtype()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"index": None}, "needs data.non_tensor_batch\\['uid'\\]"),
        ({"index": np.array(["a"], dtype=object)}, "1 entries for 2 rows"),
        ({"response_mask": torch.ones(2, 3)}, "response_mask has shape \\(2, 3\\)"),
        ({"response_mask": torch.zeros(2, 2)}, "response_mask is all zero"),
        ({"token_level_rewards": torch.tensor([[1.0, 0.0], [float("nan"), 0.0]])}, "row 1 \\(uid 'b'\\) has reward nan"),
        ({"token_level_rewards": torch.ones(2)}, "must be a 2-D"),
        ({"config": {"rllm_estimator_kwargs": 3}}, "rllm_estimator_kwargs must be a mapping"),
        ({"config": {"rllm_estimator_kwargs": {"norm_adv_by_std_in_grpo": False}}}, "set algorithm.norm_adv_by_std_in_grpo"),
    ],
)
def test_bad_input_is_a_value_error_naming_the_problem(kwargs, message):
    call = {"token_level_rewards": torch.ones(2, 2), "response_mask": torch.ones(2, 2), "index": np.array(["a", "b"], dtype=object), "config": None, **kwargs}
    with pytest.raises(ValueError, match=message):
        get_adv_estimator_fn("rllm_grpo")(**call)


@pytest.mark.parametrize("name", ["rllm_turn_grpo", "rllm_step_reinforce"])
def test_a_step_level_estimator_refuses_an_all_zero_mask_as_the_outcome_level_does(name):
    call = {"token_level_rewards": torch.ones(2, 2), "index": np.array(["a", "a"], dtype=object), "config": None}
    with pytest.raises(ValueError, match=f"'{name}': response_mask is all zero over 2 rows; every advantage would be masked out"):
        get_adv_estimator_fn(name)(response_mask=torch.zeros(2, 2, dtype=torch.int64), **call)
    advantages, _ = get_adv_estimator_fn(name)(response_mask=torch.tensor([[1, 0], [0, 0]]), **call)  # one row with a token is enough
    assert advantages[1].abs().sum() == 0


def test_opo_without_lengths_is_never_reached_because_the_mask_gives_them():
    advantages, _ = get_adv_estimator_fn("rllm_opo")(
        token_level_rewards=torch.tensor([[0.0, 1.0], [0.0, 0.0]]), response_mask=torch.tensor([[1, 1], [1, 0]]), index=np.array(["p", "p"], dtype=object)
    )
    np.testing.assert_allclose(advantages.numpy(), [[1 / 3, 1 / 3], [-2 / 3, 0.0]], rtol=1e-6)
