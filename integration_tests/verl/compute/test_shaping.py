"""``+algorithm.rllm_reward_shapers`` through verl's real ``compute_advantage`` (legacy) and v1's
``compute_advantage_for_multi_trajectories`` (sessions), for ``rllm_*`` estimators and verl's own.

The relation every path must hold: a run with shapers equals the run without them on rewards whose unit's final token
carries its terms (the terms written plainly here from the mask); and the batch's ``token_level_rewards`` are the raw
ones after the call. DAPO's soft overlong punishment is also checked against verl's own DAPO reward manager.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
import rllm_verl.plugin  # noqa: F401 - installs the extensions, as verl's entry point does
from omegaconf import OmegaConf
from rllm_verl.compute.shaping import turn_counts
from rllm_verl.versions import verl_features
from verl import DataProto
from verl.trainer.ppo import ray_trainer

WIDTH = 8
PROMPT = 3


def batch(rewards, masks, uids, prompt_lengths=None):
    """Rows with ``masks`` (lists of 0/1 over the response; 0s between 1s are tool tokens, which ``attention_mask`` keeps)."""
    n = len(rewards)
    mask = torch.zeros(n, WIDTH, dtype=torch.int64)
    attention = torch.zeros(n, PROMPT + WIDTH, dtype=torch.int64)
    token_rewards = torch.zeros(n, WIDTH)
    for row, (r, m) in enumerate(zip(rewards, masks, strict=True)):
        mask[row, : len(m)] = torch.tensor(m)
        attention[row, PROMPT - (prompt_lengths or [PROMPT] * n)[row] : PROMPT + len(m)] = 1
        ones = [t for t, v in enumerate(m) if v]
        token_rewards[row, ones[-1] if ones else 0] = r
    tensors = {"token_level_rewards": token_rewards, "token_level_scores": token_rewards.clone(), "response_mask": mask, "attention_mask": attention}
    tensors["values"] = torch.linspace(-1, 1, n * WIDTH).reshape(n, WIDTH)
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": np.array(uids, dtype=object)})


def algorithm(shapers=None, **extra):
    node = {"gamma": 1.0, "lam": 1.0, "norm_adv_by_std_in_grpo": True, **extra}
    if shapers is not None:
        node["rllm_reward_shapers"] = shapers
    return OmegaConf.create(node)


def model_tokens(m):
    return sum(m)


def dapo_term(length, max_length, buffer, factor):
    """verl's DAPO manager's overlong reward, written out."""
    exceed = length - (max_length - buffer)
    return min(-exceed / buffer * factor, 0.0)


def with_terms_at_final_tokens(data, terms_by_row):
    """The batch with ``terms_by_row[row]`` added at each named row's last model token (the reference's rewards)."""
    out = data.batch["token_level_rewards"].clone()
    mask = data.batch["response_mask"]
    for row, term in terms_by_row.items():
        last = int(torch.nonzero(mask[row])[-1])
        out[row, last] += term
    copy = DataProto.from_dict(
        tensors={**{k: v.clone() for k, v in data.batch.items()}, "token_level_rewards": out},
        non_tensors={k: v.copy() for k, v in data.non_tensor_batch.items()},
    )
    return copy


MASKS = [[1, 1, 1, 1, 1, 1, 1], [1, 1], [1, 1, 1, 1, 1, 1, 1, 1], [1, 0, 0, 1, 1], [1, 1, 1, 1, 1, 1], [1, 1, 1], []]
REWARDS = [1.0, 0.0, 1.0, 1.0, 0.5, 0.0, 0.0]
UIDS = ["a", "a", "a", "b", "b", "b", "pad"]  # the last row: verl's padding, no model token
DAPO = {"name": "dapo_overlong", "max_length": WIDTH, "buffer": 4, "factor": 0.5}


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "reinforce_plus_plus", "gae", "rllm_grpo", "rllm_rloo", "rllm_reinforce", "rllm_turn_grpo"])
def test_a_shaped_run_equals_the_unshaped_run_on_rewards_carrying_the_terms_at_each_rows_last_model_token(estimator):
    data = batch(REWARDS, MASKS, UIDS)
    terms = {row: dapo_term(model_tokens(m), WIDTH, 4, 0.5) for row, m in enumerate(MASKS) if m}
    raw = data.batch["token_level_rewards"].clone()
    shaped = ray_trainer.compute_advantage(data, estimator, config=algorithm([DAPO]))
    reference = ray_trainer.compute_advantage(with_terms_at_final_tokens(batch(REWARDS, MASKS, UIDS), terms), estimator, config=algorithm())
    assert any(terms.values()), "the batch has overlong rows"
    np.testing.assert_allclose(shaped.batch["advantages"].numpy(), reference.batch["advantages"].numpy(), rtol=0, atol=1e-6)
    assert torch.equal(shaped.batch["token_level_rewards"], raw), "the raw rewards are back in the batch after the call"


def test_verls_own_grpo_and_rllm_grpo_with_dapo_overlong_equal_verls_dapo_reward_manager_then_the_same_estimator():
    from verl.workers.reward_manager.dapo import DAPORewardManager

    from rllm_plugins.tiny import build_char_tokenizer

    tokenizer = build_char_tokenizer("abcdefgh")
    rng = np.random.default_rng(3)
    n = 12
    lengths = rng.integers(1, WIDTH + 1, n).tolist()
    scores = rng.integers(0, 2, n).astype(float).tolist()
    uids = [f"q{i // 4}" for i in range(n)]

    def dapo_batch():
        data = batch([0.0] * n, [[1] * k for k in lengths], uids)
        data.batch["prompts"] = torch.randint(3, 10, (n, PROMPT))
        data.batch["responses"] = torch.randint(3, 10, (n, WIDTH))
        data.non_tensor_batch["reward_model"] = np.array([{"ground_truth": s} for s in scores], dtype=object)
        data.non_tensor_batch["data_source"] = np.array(["toy"] * n, dtype=object)
        return data

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        return float(ground_truth)

    def manager(overlong):
        cfg = OmegaConf.create({"enable": overlong, "len": 4, "penalty_factor": 0.5, "log": False})
        return DAPORewardManager(tokenizer, num_examine=0, compute_score=compute_score, max_resp_len=WIDTH, overlong_buffer_cfg=cfg)

    for estimator in ("grpo", "rllm_grpo"):
        theirs = dapo_batch()
        theirs.batch["token_level_rewards"] = manager(True)(theirs)
        ours = dapo_batch()
        ours.batch["token_level_rewards"] = manager(False)(ours)
        assert not torch.equal(theirs.batch["token_level_rewards"], ours.batch["token_level_rewards"]), "some responses are overlong"
        want = ray_trainer.compute_advantage(theirs, estimator, config=algorithm()).batch["advantages"]
        got = ray_trainer.compute_advantage(ours, estimator, config=algorithm([DAPO])).batch["advantages"]
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0, atol=1e-6)


def test_the_shaping_metrics_reach_verls_step_metrics_and_the_raw_rewards_stay_in_its_own():
    data = batch(REWARDS, MASKS, UIDS)
    n = len(REWARDS)
    data.batch["prompts"] = torch.zeros(n, PROMPT, dtype=torch.int64)
    data.batch["responses"] = torch.zeros(n, WIDTH, dtype=torch.int64)
    out = ray_trainer.compute_advantage(data, "grpo", config=algorithm([DAPO, {"name": "turn_penalty", "coef": 0.1, "free_turns": 1}]))
    metrics = ray_trainer.compute_data_metrics(batch=out, use_critic=False)
    terms = [dapo_term(model_tokens(m), WIDTH, 4, 0.5) for m in MASKS if m]
    assert metrics["rllm/shaping/all_groups/dapo_overlong/min"] == pytest.approx(min(terms))
    assert metrics["rllm/shaping/all_groups/turn_penalty/min"] == pytest.approx(-0.1)  # row 3 has two turns
    assert metrics["critic/rewards/mean"] == pytest.approx(np.mean(REWARDS[:6]), abs=1e-6)  # verl's own, of the raw rewards


def test_each_context_value_a_shaper_names_is_read_from_the_batch_as_documented():
    from rllm_plugins.shaping import register_reward_shaper, unregister_reward_shaper

    seen = []

    @register_reward_shaper("test_context_probe")
    def probe(rewards, *, offsets, lengths, input_lengths, tool_lengths, turns, scores):
        given = {"offsets": offsets, "lengths": lengths, "inputs": input_lengths, "tools": tool_lengths, "turns": turns}
        seen.append({k: np.asarray(v).tolist() for k, v in given.items()})
        return np.zeros_like(rewards)

    try:
        data = batch(REWARDS, MASKS, UIDS, prompt_lengths=[3, 3, 2, 1, 1, 1, 3])
        ray_trainer.compute_advantage(data, "rllm_grpo", config=algorithm(["test_context_probe"]))
        # seen[-1]: the run (the first call is the config-time trial); units grouped by uid in order of first appearance,
        # the padding row in none
        rows = [0, 1, 2, 3, 4, 5]
        assert seen[-1]["offsets"] == [0, 3, 6]
        assert seen[-1]["lengths"] == [float(model_tokens(MASKS[r])) for r in rows]
        assert seen[-1]["inputs"] == [3.0, 3.0, 2.0, 1.0, 1.0, 1.0]
        assert seen[-1]["tools"] == [0.0, 0.0, 0.0, 2.0, 0.0, 0.0]  # row 3: two tool tokens between its turns
        assert seen[-1]["turns"] == [1.0, 1.0, 1.0, 2.0, 1.0, 1.0]
    finally:
        unregister_reward_shaper("test_context_probe")


def test_turn_counts_are_the_runs_of_model_tokens():
    mask = torch.tensor([[1, 1, 0, 1, 0, 0], [0, 1, 0, 1, 0, 1], [0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
    plain = [sum(1 for t in range(6) if row[t] and (t == 0 or not row[t - 1])) for row in mask.tolist()]
    assert turn_counts(mask).tolist() == plain == [2, 3, 0, 1]


SESSION_KEYS = ["p_0_0", "p_0_1", "p_1_0", "q_0_0", "q_1_0", "q_1_3", "q_2_0"]
SESSION_UIDS = ["p", "p", "p", "q", "q", "q", "q"]
SESSION_REWARDS = [0.0, 1.0, 0.5, 0.25, 0.0, 2.0, 1.0]
SESSION_MASKS = [[1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1], [1], [1, 1], [1, 1, 1, 1, 1], [1, 1, 1]]


@pytest.mark.skipif(not verl_features().v1_trainer, reason="multi-output sessions are verl's v1 trainer's (verl >= 0.9)")
@pytest.mark.parametrize("estimator", ["grpo", "rllm_grpo", "rllm_reinforce"])
def test_a_multi_output_session_is_shaped_once_by_all_its_model_tokens_at_its_final_output(estimator):
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    total, final = defaultdict(int), {}
    for row, key in enumerate(SESSION_KEYS):
        session, index = key.rsplit("_", 1)
        total[session] += model_tokens(SESSION_MASKS[row])
        if session not in final or int(index) > final[session][0]:
            final[session] = (int(index), row)
    terms = {row: dapo_term(total[s], WIDTH, 4, 0.5) for s, (_, row) in final.items()}
    assert any(terms.values()), "a session is overlong only by its outputs together"
    data = batch(SESSION_REWARDS, SESSION_MASKS, SESSION_UIDS)
    shaped = compute_advantage_for_multi_trajectories(data, SESSION_KEYS, adv_estimator=estimator, config=algorithm([DAPO]))
    reference_batch = with_terms_at_final_tokens(batch(SESSION_REWARDS, SESSION_MASKS, SESSION_UIDS), terms)
    reference = compute_advantage_for_multi_trajectories(reference_batch, SESSION_KEYS, adv_estimator=estimator, config=algorithm())
    np.testing.assert_allclose(shaped.batch["advantages"].numpy(), reference.batch["advantages"].numpy(), rtol=0, atol=1e-6)
    assert torch.equal(shaped.batch["token_level_rewards"], batch(SESSION_REWARDS, SESSION_MASKS, SESSION_UIDS).batch["token_level_rewards"])


def test_a_shaper_that_needs_what_verl_has_not_is_refused_naming_it():
    from rllm_verl.compute.shaping import shapers_of

    with pytest.raises(ValueError, match=r"algorithm.rllm_reward_shapers\[0\]: reward shaper 'dapo_overlong' .* needs the option\(s\) \['buffer'\]"):
        shapers_of(algorithm([{"name": "dapo_overlong", "max_length": 8}]))
    with pytest.raises(ValueError, match=r"Unknown reward shaper 'dapo_overlog'\. Did you mean 'dapo_overlong'\?"):
        ray_trainer.compute_advantage(batch(REWARDS, MASKS, UIDS), "grpo", config=algorithm(["dapo_overlog"]))


@pytest.mark.parametrize("estimator", ["gdpo", "remax"])
def test_verls_own_estimators_whose_numbers_would_not_follow_the_shaped_rewards_are_refused(estimator):
    from verl.trainer.ppo import core_algos

    if estimator not in core_algos.ADV_ESTIMATOR_REGISTRY:
        pytest.skip(f"this verl has no {estimator!r}")
    with pytest.raises(ValueError, match=rf"algorithm.rllm_reward_shapers: verl's own '{estimator}' .* so its advantages would not follow the shaped rewards"):
        ray_trainer.compute_advantage(batch(REWARDS, MASKS, UIDS), estimator, config=algorithm([DAPO]))


BUILTINS = [
    DAPO,
    {"name": "length_penalty"},
    {"name": "linear_length_penalty", "max_length": WIDTH},
    {"name": "efficiency_bonus", "cost": "turns"},
    {"name": "group_length_penalty", "absolute_slack": 0.0, "success_threshold": 1.0},
    {"name": "turn_penalty", "coef": 0.1},
]


@pytest.mark.skipif(not verl_features().v1_trainer, reason="multi-output sessions are verl's v1 trainer's (verl >= 0.9)")
@pytest.mark.parametrize("entry", BUILTINS, ids=lambda e: e["name"])
@pytest.mark.parametrize("estimator", ["grpo", "rllm_rloo"])
def test_every_builtin_shapes_a_session_from_its_outputs_together(entry, estimator):
    """The reference: the core's shape_rewards on each session's context written out here (its outputs' model tokens, its
    first output's prompt, its outputs as turns), its terms added at its final output's last model token."""
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    from rllm_plugins import shape_rewards

    sessions: dict[str, list[int]] = defaultdict(list)
    for row, key in enumerate(SESSION_KEYS):
        sessions[key.rsplit("_", 1)[0]].append(row)
    order = [s for uid in dict.fromkeys(SESSION_UIDS) for s in sessions if SESSION_UIDS[sessions[s][0]] == uid]
    final = {s: max(sessions[s], key=lambda r: int(SESSION_KEYS[r].rsplit("_", 1)[1])) for s in order}
    sizes = [sum(1 for s in order if SESSION_UIDS[sessions[s][0]] == uid) for uid in dict.fromkeys(SESSION_UIDS)]
    context = {
        "offsets": np.cumsum([0, *sizes]),
        "lengths": np.array([sum(model_tokens(SESSION_MASKS[r]) for r in sessions[s]) for s in order], dtype=float),
        "input_lengths": np.full(len(order), float(PROMPT)),
        "tool_lengths": np.zeros(len(order)),
        "turns": np.array([len(sessions[s]) for s in order], dtype=float),
    }
    rewards = np.array([SESSION_REWARDS[final[s]] for s in order])
    _, terms, _ = shape_rewards(rewards, [entry], **context)
    (term,) = terms.values()
    data = batch(SESSION_REWARDS, SESSION_MASKS, SESSION_UIDS)
    shaped = compute_advantage_for_multi_trajectories(data, SESSION_KEYS, adv_estimator=estimator, config=algorithm([entry]))
    reference_batch = with_terms_at_final_tokens(batch(SESSION_REWARDS, SESSION_MASKS, SESSION_UIDS), {final[s]: t for s, t in zip(order, term, strict=True)})
    reference = compute_advantage_for_multi_trajectories(reference_batch, SESSION_KEYS, adv_estimator=estimator, config=algorithm())
    np.testing.assert_allclose(shaped.batch["advantages"].numpy(), reference.batch["advantages"].numpy(), rtol=0, atol=1e-6)
