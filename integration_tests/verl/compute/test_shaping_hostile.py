"""``+algorithm.rllm_reward_shapers`` in verl against hostile inputs: the KL penalty in the rewards, a row without model
tokens in a group, 16-bit rewards, v1 sessions under verl's own estimators, reward keys, verl's gdpo and remax."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
import rllm_verl.plugin  # noqa: F401 - installs the extensions, as verl's entry point does
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo import ray_trainer

WIDTH = 8
PROMPT = 3


def batch(rewards, masks, uids, scores=None, dtype=torch.float32):
    """Rows with ``masks`` over the response, each row's reward at its last model token (verl's reward managers' place);
    ``scores`` (default the rewards) as ``token_level_scores``."""
    n = len(rewards)
    mask = torch.zeros(n, WIDTH, dtype=torch.int64)
    attention = torch.zeros(n, PROMPT + WIDTH, dtype=torch.int64)
    token_rewards = torch.zeros(n, WIDTH, dtype=torch.float64)
    token_scores = torch.zeros(n, WIDTH, dtype=torch.float64)
    for row, m in enumerate(masks):
        mask[row, : len(m)] = torch.tensor(m)
        attention[row, : PROMPT + len(m)] = 1
        ones = [t for t, v in enumerate(m) if v]
        token_rewards[row, ones[-1] if ones else 0] = rewards[row]
        token_scores[row, ones[-1] if ones else 0] = (rewards if scores is None else scores)[row]
    tensors = {
        "token_level_rewards": token_rewards.to(dtype),
        "token_level_scores": token_scores.to(dtype),
        "response_mask": mask,
        "attention_mask": attention,
        "prompts": torch.ones(n, PROMPT, dtype=torch.int64),
    }
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": np.array(uids, dtype=object)})


def algorithm(shapers=None, **extra):
    node = {"gamma": 1.0, "lam": 1.0, "norm_adv_by_std_in_grpo": True, **extra}
    if shapers is not None:
        node["rllm_reward_shapers"] = shapers
    return OmegaConf.create(node)


def advantages(data, estimator, config):
    return ray_trainer.compute_advantage(data, estimator, config=config).batch["advantages"].to(torch.float64).numpy()


DAPO = {"name": "dapo_overlong", "max_length": WIDTH, "buffer": 4, "factor": 0.5}


# ----------------------------------------------------------------------------------------------------------------------
# numbers
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("estimator", ["grpo", "rllm_grpo"])
def test_under_use_kl_in_reward_group_length_penalty_judges_success_on_the_scores(estimator):
    """With ``algorithm.use_kl_in_reward`` the rewards carry the KL penalty; ``group_length_penalty`` judges success on the task
    scores (``token_level_scores``), so a long correct answer pays as it does without the KL term."""
    masks = [[1] * 2, [1] * 3, [1] * 8, [1] * 1, [1] * 2, [1] * 8]
    scores = [1.0, 1.0, 1.0, 0.0, 1.0, 1.0]
    uids = ["a", "a", "a", "b", "b", "b"]
    kl = 0.001  # per model token
    with_kl = [s - kl * sum(m) for s, m in zip(scores, masks, strict=True)]
    gl = {"name": "group_length_penalty", "relative_slack": 0.0, "absolute_slack": 0.0, "beta": 0.1, "cap": 0.2}

    shaped_no_kl = advantages(batch(scores, masks, uids), estimator, algorithm([gl]))
    unshaped_no_kl = advantages(batch(scores, masks, uids), estimator, algorithm())
    assert not np.allclose(shaped_no_kl, unshaped_no_kl), "without KL the long successes pay"
    shaped = advantages(batch(with_kl, masks, uids, scores=scores), estimator, algorithm([gl]))
    unshaped = advantages(batch(with_kl, masks, uids, scores=scores), estimator, algorithm())
    assert not np.allclose(shaped, unshaped, rtol=0, atol=1e-9), "with KL in the rewards the long successes must still pay"


def test_a_row_without_model_tokens_stays_in_the_shapers_group_under_verls_own_rloo_as_under_rllm_rloo():
    """A row without model tokens stays a unit of its group for the shapers, as verl\'s ``rloo`` and ``rllm_rloo`` count it: both
    agree shaped as they do unshaped (``length_penalty``\'s pass rate is the group\'s over all three rows)."""
    masks = [[1] * 4, [1] * 2, [], [1] * 3, [1] * 5, [1] * 1]
    rewards = [1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    uids = ["a", "a", "a", "b", "b", "b"]
    lp = {"name": "length_penalty", "output_weight": 0.5, "input_weight": 0.0, "turns_weight": 0.0}
    np.testing.assert_allclose(
        advantages(batch(rewards, masks, uids), "rloo", algorithm()), advantages(batch(rewards, masks, uids), "rllm_rloo", algorithm()), atol=1e-6
    )
    ours = advantages(batch(rewards, masks, uids), "rllm_rloo", algorithm([lp]))
    theirs = advantages(batch(rewards, masks, uids), "rloo", algorithm([lp]))
    assert ours[0, 0] == pytest.approx(0.25, abs=1e-6), "by hand: p = 2/3, terms -1/3 * [1, 0.5, 0]; 2/3 - (5/6 + 0) / 2"
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=1e-6)


def test_verls_own_grpo_on_bf16_rewards_keeps_the_terms():
    """16-bit rewards are shaped in float32 for verl's own estimator's call: bf16 would round 10 - 0.02 back to 10. The
    advantages equal verl's ``grpo`` on float32 rewards with the same shapers."""
    masks = [[1] * 7, [1] * 2, [1] * 8, [1] * 6, [1] * 3, [1] * 8]
    rewards = [10.0, 10.0, 10.0, 10.0, 10.0, 10.0]
    uids = ["a", "a", "a", "b", "b", "b"]
    small = {"name": "dapo_overlong", "max_length": WIDTH, "buffer": 4, "factor": 0.02}
    wide = advantages(batch(rewards, masks, uids, dtype=torch.float32), "grpo", algorithm([small]))
    assert np.abs(wide).max() > 0.1, "the terms move the advantages"
    narrow = advantages(batch(rewards, masks, uids, dtype=torch.bfloat16), "grpo", algorithm([small]))
    np.testing.assert_allclose(narrow, wide, rtol=0, atol=1e-5)


def test_v1_sessions_under_verls_own_rloo_are_shaped_output_by_output_as_rloo_counts_them():
    """On v1 sessions verl\'s own estimators other than ``grpo`` treat each output as a sample, and the shapers do too (one
    unit per output, its own model tokens); under ``grpo`` and the ``rllm_*`` names a session is one unit."""
    from rllm_verl.versions import verl_features

    if not verl_features().v1_trainer:
        pytest.skip("multi-output sessions are verl's v1 trainer's (verl >= 0.9)")
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    keys = ["p_0_0", "p_0_1", "p_1_0", "q_0_0", "q_1_0"]
    uids = ["p", "p", "p", "q", "q"]
    masks = [[1] * 5, [1] * 5, [1] * 3, [1] * 2, [1] * 2]
    rewards = [0.0, 1.0, 1.0, 1.0, 0.0]
    seen = []
    from rllm_plugins.shaping import register_reward_shaper, unregister_reward_shaper

    @register_reward_shaper("test_probe_lengths")
    def probe(rewards, *, lengths):
        seen.append(np.asarray(lengths).tolist())
        return np.zeros_like(rewards)

    try:
        compute_advantage_for_multi_trajectories(batch(rewards, masks, uids), keys, adv_estimator="rloo", config=algorithm(["test_probe_lengths"]))
    finally:
        unregister_reward_shaper("test_probe_lengths")
    assert sorted(seen[-1]) == [2.0, 2.0, 3.0, 5.0, 5.0], f"one unit per output; the shaper saw {seen[-1]}"


# ----------------------------------------------------------------------------------------------------------------------
# refusals
# ----------------------------------------------------------------------------------------------------------------------


def test_rllm_grpo_with_gdpo_reward_keys_and_shapers_is_refused_naming_verls_settings():
    """``rllm_*`` with ``algorithm.gdpo_reward_keys`` and shapers is refused naming verl\'s settings."""
    data = batch([1.0, 0.0, 1.0, 0.0], [[1] * 8, [1] * 2, [1] * 3, [1] * 2], ["a", "a", "b", "b"])
    data.non_tensor_batch["acc"] = np.array([1.0, 0.0, 1.0, 0.0], dtype=object)
    data.non_tensor_batch["fmt"] = np.array([1.0, 1.0, 0.0, 0.0], dtype=object)
    with pytest.raises(ValueError, match="gdpo_reward_keys"):
        ray_trainer.compute_advantage(data, "rllm_grpo", config=algorithm([DAPO], gdpo_reward_keys=["acc", "fmt"]))


# ----------------------------------------------------------------------------------------------------------------------
# verl's own estimators that cannot be shaped
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("estimator", ["gdpo", "remax"])
def test_verls_own_gdpo_and_remax_are_refused_with_shapers_naming_why(estimator):
    """verl\'s ``gdpo`` rebuilds its scores from ``non_tensor_batch`` and ``remax`` subtracts the unshaped ``reward_baselines``:
    with shapers both are refused, naming the estimator and why."""
    from verl.trainer.ppo import core_algos

    if estimator not in core_algos.ADV_ESTIMATOR_REGISTRY:
        pytest.skip(f"this verl has no {estimator!r}")
    data = batch([1.0, 1.0], [[1] * 8, [1] * 8], ["a", "a"])
    data.batch["reward_baselines"] = torch.tensor([1.0, 1.0])
    data.non_tensor_batch["acc"] = np.array([1.0, 1.0], dtype=object)
    with pytest.raises(ValueError, match=f"verl's own '{estimator}'"):
        ray_trainer.compute_advantage(data, estimator, config=algorithm([DAPO], gdpo_reward_keys=["acc"]))


@pytest.mark.parametrize("estimator", ["grpo", "rllm_rloo"])
def test_interleaved_rows_and_ids_with_separators_change_no_row_of_a_group_dependent_shaper(estimator):
    """The rows of one batch in another order, their uids holding ``|``, ``_`` and ``:`` (and one an int): each row keeps its
    advantage, as the shapers' groups are the uid's whatever the order."""
    masks = [[1] * 4, [1] * 2, [1] * 7, [1] * 3, [1] * 5, [1] * 1, [1] * 8]
    rewards = [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.5]
    uids = ["q|1_a:x", "q|1_a:x", "q|1_a:x", 7, 7, 7, 7]
    lp = [{"name": "length_penalty", "input_weight": 0.0}, DAPO]
    plain = advantages(batch(rewards, masks, uids), estimator, algorithm(lp))
    order = [6, 0, 3, 2, 5, 1, 4]
    shuffled = advantages(batch([rewards[i] for i in order], [masks[i] for i in order], [uids[i] for i in order]), estimator, algorithm(lp))
    np.testing.assert_allclose(shuffled, plain[order], rtol=0, atol=1e-6)
    assert np.abs(plain).max() > 0
