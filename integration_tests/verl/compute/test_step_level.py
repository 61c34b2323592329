"""Step-level rLLM estimators through verl's own ``compute_advantage`` on multi-turn rows (``rllm_gigpo``, ``rllm_step_reinforce``).

The reference is written plainly here: turns found token by token, turn rewards summed up to the
next turn, anchors as tuples of the environment tokens before a turn, then the GiGPO formulas
with dicts (as verl-agent's code is organised), all independent of the adapter.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
from omegaconf import OmegaConf
from rllm_verl.versions import verl_features
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

from rllm_plugins.registry import available_estimators, get_estimator_spec

EPS = 1e-6
# the legacy trainer: chosen by trainer.use_v1=false where the release has a v1 trainer, the only one before 0.9
LEGACY = ["trainer.use_v1=false"] if verl_features().v1_trainer else []


def random_multi_turn_batch(rng, rows=24, length=40, uids=("p_0", "p_1", "p_2", "p_3"), vocab=3):
    """Rows of 1-5 turns separated by environment segments drawn from a small vocabulary (so states repeat)."""
    responses = torch.zeros(rows, length, dtype=torch.int64)
    mask = torch.zeros(rows, length, dtype=torch.float32)
    rewards = torch.zeros(rows, length, dtype=torch.float32)
    for r in range(rows):
        pos, turns = 0, int(rng.integers(1, 6))
        for k in range(turns):
            if k:
                env = int(rng.integers(1, 3))
                responses[r, pos : pos + env] = torch.from_numpy(rng.integers(0, vocab, env))
                pos += env
            n = int(rng.integers(1, 4))
            if pos + n > length:
                break
            responses[r, pos : pos + n] = 100 + k
            mask[r, pos : pos + n] = 1
            rewards[r, pos + n - 1] = float(rng.choice([0.0, 0.5, 1.0]))  # per-turn reward at the turn's end
            pos += n
    index = np.array([uids[i % len(uids)] for i in range(rows)], dtype=object)
    perm = rng.permutation(rows)  # shuffled rows
    return responses[perm], mask[perm], rewards[perm], index[perm]


def reference_turns(responses, mask, rewards):
    """Per row: list of (token positions, reward up to the next turn, anchor)."""
    out = []
    for r in range(mask.shape[0]):
        m = mask[r].tolist()
        starts = [t for t in range(len(m)) if m[t] and (t == 0 or not m[t - 1])]
        turns = []
        for k, s in enumerate(starts):
            e = s
            while e < len(m) and m[e]:
                e += 1
            seg_start = 0 if k == 0 else s
            seg_end = starts[k + 1] if k + 1 < len(starts) else len(m)
            reward = float(sum(rewards[r, seg_start:seg_end].tolist()))
            prev_end = 0 if k == 0 else turns[-1][0][-1] + 1
            anchor = "prompt" if k == 0 else tuple(responses[r, prev_end:s].tolist())
            turns.append((list(range(s, e)), reward, anchor))
        out.append(turns)
    return out


def reference_gigpo(turns, index, gamma, w, norm=True, steps_only=False):
    """(B, T) advantages from the plain formulas; ``steps_only``: step_reinforce (task group as the anchor group)."""
    groups = {}
    for r, uid in enumerate(index):
        groups.setdefault(uid, []).append(r)
    per_turn = {}
    for rows in groups.values():
        outcomes = [sum(t[1] for t in turns[r]) for r in rows]
        if len(rows) == 1:
            mean, sd = 0.0, 1.0
        else:
            mean, sd = statistics.fmean(outcomes), statistics.pstdev(outcomes)
        episode = {r: ((o - mean) / (sd + EPS) if norm else o - mean) for r, o in zip(rows, outcomes, strict=True)}
        returns = {}
        for r in rows:
            running = 0.0
            for k in reversed(range(len(turns[r]))):
                running = turns[r][k][1] + gamma * running
                returns[(r, k)] = running
        anchor_groups = {}
        for r in rows:
            for k, (_, _, anchor) in enumerate(turns[r]):
                anchor_groups.setdefault("all" if steps_only else anchor, []).append(returns[(r, k)])
        for r in rows:
            for k, (_, _, anchor) in enumerate(turns[r]):
                members = anchor_groups["all" if steps_only else anchor]
                if len(members) == 1:
                    step = 0.0
                else:
                    m = statistics.fmean(members)
                    step = (returns[(r, k)] - m) / (statistics.pstdev(members) + EPS) if norm else returns[(r, k)] - m
                per_turn[(r, k)] = step if steps_only else episode[r] + w * step
    out = np.zeros((len(turns), max((p for t in turns for tok in t for p in tok[0]), default=0) + 1))
    for (r, k), value in per_turn.items():
        for p in turns[r][k][0]:
            out[r, p] = value
    return out


def run(name, responses, mask, rewards, index, **algorithm):
    data = DataProto.from_dict(tensors={"responses": responses, "response_mask": mask, "token_level_rewards": rewards}, non_tensors={"uid": index})
    gamma, norm = algorithm.pop("gamma", 1.0), algorithm.pop("norm", True)
    config = OmegaConf.create({"adv_estimator": name, "gamma": gamma, "norm_adv_by_std_in_grpo": norm, **algorithm})
    out = compute_advantage(data, adv_estimator=name, gamma=config.gamma, config=config)
    return out.batch["advantages"], out.batch["returns"]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("gamma", "w", "norm"), [(1.0, 1.0, True), (0.9, 0.5, True), (0.8, 1.0, False)])
def test_rllm_gigpo_equals_the_plain_formulas_on_random_shuffled_multi_turn_rows(seed, gamma, w, norm):
    responses, mask, rewards, index = random_multi_turn_batch(np.random.default_rng(seed))
    kwargs = {"rllm_estimator_kwargs": {"step_advantage_w": w}}
    advantages, returns = run("rllm_gigpo", responses, mask, rewards, index, gamma=gamma, norm=norm, **kwargs)
    want = reference_gigpo(reference_turns(responses, mask, rewards), index, gamma, w, norm)
    got = advantages.numpy()
    assert got[:, : want.shape[1]] == pytest.approx(want, rel=1e-5, abs=1e-5)
    assert (got[:, want.shape[1] :] == 0).all()
    assert advantages.dtype == torch.float32 and torch.equal(advantages, returns)
    assert (advantages[mask == 0] == 0).all()


@pytest.mark.parametrize("seed", range(4))
def test_rllm_step_reinforce_equals_the_plain_formulas(seed):
    responses, mask, rewards, index = random_multi_turn_batch(np.random.default_rng(50 + seed))
    advantages, _ = run("rllm_step_reinforce", responses, mask, rewards, index, gamma=0.9)
    want = reference_gigpo(reference_turns(responses, mask, rewards), index, 0.9, 1.0, steps_only=True)
    assert advantages.numpy()[:, : want.shape[1]] == pytest.approx(want, rel=1e-5, abs=1e-5)


def test_the_kwargs_gamma_wins_over_algorithm_gamma():
    responses, mask, rewards, index = random_multi_turn_batch(np.random.default_rng(7))
    a, _ = run("rllm_gigpo", responses, mask, rewards, index, gamma=1.0, rllm_estimator_kwargs={"gamma": 0.5})
    b, _ = run("rllm_gigpo", responses, mask, rewards, index, gamma=0.5)
    assert torch.equal(a, b)


def test_rows_of_one_turn_give_grpo_plus_w_times_grpo_of_the_same_outcomes():
    rng = np.random.default_rng(3)
    rewards = torch.zeros(8, 5)
    rewards[:, 2] = torch.from_numpy(rng.integers(0, 2, 8).astype(np.float32))
    mask = torch.zeros(8, 5)
    mask[:, :3] = 1
    index = np.array(["a"] * 4 + ["b"] * 4, dtype=object)
    gigpo, _ = run("rllm_gigpo", torch.zeros(8, 5, dtype=torch.int64), mask, rewards, index, rllm_estimator_kwargs={"step_advantage_w": 1.0})
    grpo, _ = run("rllm_grpo", torch.zeros(8, 5, dtype=torch.int64), mask, rewards, index)
    assert gigpo.numpy() == pytest.approx(2 * grpo.numpy(), rel=1e-6, abs=1e-6)  # one anchor ('prompt') per group: both parts are GRPO


def test_bf16_and_integer_rewards():
    responses, mask, rewards, index = random_multi_turn_batch(np.random.default_rng(11))
    want, _ = run("rllm_gigpo", responses, mask, rewards, index)
    half, _ = run("rllm_gigpo", responses, mask, rewards.to(torch.bfloat16), index)
    assert half.dtype == torch.bfloat16
    assert half.float().numpy() == pytest.approx(want.numpy(), rel=1e-2, abs=1e-2)
    ints, _ = run("rllm_gigpo", responses, mask, (rewards * 2).to(torch.int64), index)
    assert ints.dtype == torch.get_default_dtype()
    want2, _ = run("rllm_gigpo", responses, mask, rewards * 2, index)
    assert ints.numpy() == pytest.approx(want2.numpy(), rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("name", ["rllm_gigpo", "rllm_step_reinforce"])
def test_a_row_without_model_tokens_gets_zero_and_stays_out_of_every_statistic(name):
    """As verl's v1 _balance_batch pads a batch: rows with response_mask all 0 (and a reward) change nobody's advantage."""
    responses, mask, rewards, index = random_multi_turn_batch(np.random.default_rng(1))
    keep = [r for r in range(mask.shape[0]) if r not in (5, 9)]
    want, _ = run(name, responses[keep], mask[keep], rewards[keep], index[keep], gamma=0.9)
    mask[5] = 0
    mask[9] = 0
    rewards[5, 0] = 7.0  # a reward on a row without model tokens is no outcome of any episode
    got, _ = run(name, responses, mask, rewards, index, gamma=0.9)
    assert torch.count_nonzero(got[[5, 9]]) == 0
    assert got[keep].numpy() == pytest.approx(want.numpy(), rel=1e-6, abs=1e-6)


def test_a_group_of_rows_without_model_tokens_alone_gets_zero():
    responses, mask, rewards, index = random_multi_turn_batch(np.random.default_rng(3))
    pad = index == index[0]
    mask[torch.from_numpy(pad)] = 0
    got, _ = run("rllm_gigpo", responses, mask, rewards, index)
    assert torch.count_nonzero(got[torch.from_numpy(pad)]) == 0
    assert torch.count_nonzero(got) > 0


def test_without_responses_gigpo_names_the_extensions_to_check():
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    _, mask, rewards, index = random_multi_turn_batch(np.random.default_rng(1))
    with pytest.raises(
        ValueError, match=r"needs `responses` to form anchor states.*RLLM_PLUGINS_VERL_REWARD_KEYS \(legacy trainer\) and RLLM_PLUGINS_VERL_V1_BATCH"
    ):
        get_adv_estimator_fn("rllm_gigpo")(token_level_rewards=rewards, response_mask=mask, index=index, config=OmegaConf.create({"gamma": 1.0}))
    advantages, _ = get_adv_estimator_fn("rllm_step_reinforce")(token_level_rewards=rewards, response_mask=mask, index=index, config=None)
    assert advantages.shape == rewards.shape


def test_gdpo_reward_keys_with_a_step_level_estimator_are_refused():
    responses, mask, rewards, index = random_multi_turn_batch(np.random.default_rng(2))
    with pytest.raises(ValueError, match=r"'rllm_gigpo' is step-level: .* algorithm.gdpo_reward_keys .* cannot apply"):
        run("rllm_gigpo", responses, mask, rewards, index, gdpo_reward_keys=["acc"])


def test_verl_check_passes_gigpo_on_both_trainers_and_refuses_a_bad_gamma():
    from rllm_verl.tools.check import verl_check

    assert verl_check(["algorithm.adv_estimator=rllm_gigpo"]).ok
    assert verl_check(["algorithm.adv_estimator=rllm_gigpo", *LEGACY]).ok
    assert verl_check(["algorithm.adv_estimator=rllm_step_reinforce"]).ok
    bad = verl_check(["algorithm.adv_estimator=rllm_gigpo", *LEGACY, "+algorithm.rllm_estimator_kwargs.gamma=1.5"])
    assert not bad.ok and "gamma (the discount of step returns) must be a number in [0, 1]" in str(bad)


def test_outcome_level_names_are_unchanged_by_responses_in_the_batch():
    responses, mask, rewards, index = random_multi_turn_batch(np.random.default_rng(4))
    with_responses, _ = run("rllm_grpo", responses, mask, rewards, index)
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    without, _ = get_adv_estimator_fn("rllm_grpo")(token_level_rewards=rewards, response_mask=mask, index=index, config=None)
    assert torch.equal(with_responses, without)


def test_v1_sessions_join_their_outputs_into_one_episode_of_their_turns():
    """Keys {uid}_{session}_{index}: a session's steps are the turns of its outputs in index order; its outcome the final output's reward."""
    pytest.importorskip("transfer_queue", reason="verl's v1 trainer needs TransferQueue")
    from rllm_verl.versions import verl_features

    if not verl_features().v1_trainer:  # test_versions.py checks that the sessions extension is absent there
        pytest.skip(f"verl {verl_features().version} has no v1 trainer")
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    rng = np.random.default_rng(5)
    responses, mask, rewards, index = random_multi_turn_batch(rng, rows=12, uids=("u_a", "u_b"))
    index = np.array(["u_a"] * 6 + ["u_b"] * 6, dtype=object)
    keys = ["u_a_s0_0", "u_a_s0_1", "u_a_s1_0", "u_a_s2_0", "u_a_s2_3", "u_a_s2_1", "u_b_s0_0", "u_b_s1_0", "u_b_s1_1", "u_b_s2_0", "u_b_s3_0", "u_b_s3_1"]
    # every output's first turn is anchored at its own prompt: u_a_s2_3 starts from the task prompt again, so it meets the first outputs
    prompts = torch.tensor([[7, 7], [8, 1], [7, 7], [7, 7], [7, 7], [8, 1], [6, 6], [6, 6], [8, 1], [6, 6], [6, 6], [8, 1]])
    perm = rng.permutation(12)
    data = DataProto.from_dict(
        tensors={"responses": responses[perm], "response_mask": mask[perm], "token_level_rewards": rewards[perm], "prompts": prompts[perm]},
        non_tensors={"uid": index[perm]},
    )
    config = OmegaConf.create({"adv_estimator": "rllm_gigpo", "gamma": 0.9, "norm_adv_by_std_in_grpo": True})
    got = compute_advantage_for_multi_trajectories(data, [keys[p] for p in perm], adv_estimator="rllm_gigpo", config=config).batch["advantages"].numpy()

    # reference: episodes = sessions, their turns concatenated in output order
    turns = reference_turns(responses[perm], mask[perm], rewards[perm])
    sessions = {}
    for row, p in enumerate(perm):
        uid, session, out = keys[p].rsplit("_", 2)
        sessions.setdefault((uid, session), []).append((int(out), row))
    for outs in sessions.values():
        for _, row in outs:
            positions, reward, _ = turns[row][0]
            turns[row][0] = (positions, reward, ("prompt", *prompts[perm][row].tolist()))
    per_turn, by_group = {}, {}
    for (uid, _session), outs in sessions.items():
        outs.sort()
        steps = [(row, k) for _, row in outs for k in range(len(turns[row]))]
        outcome = sum(t[1] for t in turns[outs[-1][1]])
        by_group.setdefault(uid, []).append((steps, outcome))
    for episodes in by_group.values():
        outcomes = [o for _, o in episodes]
        mean, sd = (0.0, 1.0) if len(outcomes) == 1 else (statistics.fmean(outcomes), statistics.pstdev(outcomes))
        returns, anchor_groups = {}, {}
        for steps, _ in episodes:
            running = 0.0
            for row, k in reversed(steps):
                running = turns[row][k][1] + 0.9 * running
                returns[(row, k)] = running
            for row, k in steps:
                anchor_groups.setdefault(turns[row][k][2], []).append(returns[(row, k)])
        for steps, outcome in episodes:
            for row, k in steps:
                members = anchor_groups[turns[row][k][2]]
                step = 0.0 if len(members) == 1 else (returns[(row, k)] - statistics.fmean(members)) / (statistics.pstdev(members) + EPS)
                per_turn[(row, k)] = (outcome - mean) / (sd + EPS) + step
    want = np.zeros_like(got)
    for (row, k), value in per_turn.items():
        want[row, turns[row][k][0]] = value
    assert got == pytest.approx(want, rel=1e-5, abs=1e-5)


def test_an_anchor_override_in_the_batch_replaces_the_environment_tokens():
    responses, mask, rewards, index = random_multi_turn_batch(np.random.default_rng(9), rows=8)
    turns = reference_turns(responses, mask, rewards)
    same = np.empty(8, dtype=object)
    same[:] = [tuple("s" for _ in t) for t in turns]  # one state everywhere: gigpo's step part becomes step_reinforce's
    data = DataProto.from_dict(
        tensors={"responses": responses, "response_mask": mask, "token_level_rewards": rewards}, non_tensors={"uid": index, "anchor_states": same}
    )
    config = OmegaConf.create({"adv_estimator": "rllm_gigpo", "gamma": 1.0, "norm_adv_by_std_in_grpo": True})
    got = compute_advantage(data, adv_estimator="rllm_gigpo", config=config).batch["advantages"].numpy()
    steps_only = reference_gigpo(turns, index, 1.0, 1.0, steps_only=True)
    episode = reference_gigpo(turns, index, 1.0, 0.0)
    assert got[:, : steps_only.shape[1]] == pytest.approx(episode + steps_only, rel=1e-5, abs=1e-5)
    wrong = same.copy()
    wrong[3] = ("s",) * (len(turns[3]) + 1)
    data.non_tensor_batch["anchor_states"] = wrong
    with pytest.raises(ValueError, match=rf"row 3 \(uid '{index[3]}'\) has {len(turns[3])} turns .* gives {len(turns[3]) + 1}; give one anchor state per turn"):
        compute_advantage(data, adv_estimator="rllm_gigpo", config=config)


def test_responses_of_another_shape_than_the_mask_are_refused():
    responses, mask, rewards, index = random_multi_turn_batch(np.random.default_rng(12), rows=8)
    for other in (responses[:, :20], torch.cat([responses, responses], dim=1)):
        with pytest.raises(ValueError, match=rf"responses has shape \(8, {other.shape[1]}\) but response_mask \(8, 40\); anchor states are read"):
            run("rllm_gigpo", other, mask, rewards, index)


def test_an_unhashable_anchor_override_is_named_by_row_uid_and_turn():
    responses, mask, rewards, index = random_multi_turn_batch(np.random.default_rng(9), rows=8)
    turns = reference_turns(responses, mask, rewards)
    states = np.empty(8, dtype=object)
    states[:] = [tuple("s" for _ in t) for t in turns]
    row = 5
    states[row] = (*("s" for _ in turns[row][:-1]), ["s"])
    data = DataProto.from_dict(
        tensors={"responses": responses, "response_mask": mask, "token_level_rewards": rewards}, non_tensors={"uid": index, "anchor_states": states}
    )
    config = OmegaConf.create({"adv_estimator": "rllm_gigpo", "gamma": 1.0, "norm_adv_by_std_in_grpo": True})
    with pytest.raises(ValueError, match=rf"row {row} \(uid '{index[row]}'\), turn {len(turns[row]) - 1}: anchor state list \['s'\] is unhashable"):
        compute_advantage(data, adv_estimator="rllm_gigpo", config=config)


def test_compute_advantage_without_config_discounts_with_its_gamma_argument():
    """Before: gamma=0.5 without config silently discounted with 1.0."""
    responses, mask, rewards, index = random_multi_turn_batch(np.random.default_rng(12))
    data = DataProto.from_dict(tensors={"responses": responses, "response_mask": mask, "token_level_rewards": rewards}, non_tensors={"uid": index})
    got = compute_advantage(data, adv_estimator="rllm_gigpo", gamma=0.5).batch["advantages"].numpy()
    want = np.zeros_like(got)
    discounted = reference_gigpo(reference_turns(responses, mask, rewards), index, gamma=0.5, w=1.0)
    want[:, : discounted.shape[1]] = discounted
    assert got == pytest.approx(want, rel=1e-5, abs=1e-5)
    undiscounted = reference_gigpo(reference_turns(responses, mask, rewards), index, gamma=1.0, w=1.0)
    assert not np.allclose(got[:, : undiscounted.shape[1]], undiscounted)


def test_verl_check_on_the_legacy_trainer_fails_when_the_extension_that_carries_responses_is_off():
    """Before: OK, then the first real call failed ("needs `responses`"): the trial handed `responses` to the estimator itself."""
    import json
    import os
    import subprocess
    import sys

    code = (
        "import json; from rllm_verl.tools.check import verl_check; "
        f"r = verl_check(['algorithm.adv_estimator=rllm_gigpo', *{LEGACY!r}]); print(json.dumps(r.as_dict()))"
    )
    env = {**os.environ, "RLLM_PLUGINS_VERL_REWARD_KEYS": "0"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert not report["ok"]
    assert "on verl's legacy trainer (trainer.use_v1=false)" in report["errors"][0] and "RLLM_PLUGINS_VERL_REWARD_KEYS" in report["errors"][0]


def test_rows_that_are_all_single_turn_warn_once_naming_what_to_do():
    """Before: rllm_gigpo on single-turn rows was silently 2 x rllm_grpo."""
    import warnings

    from rllm_verl.compute import steps as step_bridge

    step_bridge._warned_single_turn.discard("gigpo")
    responses, mask, rewards, index = random_multi_turn_batch(np.random.default_rng(13))
    single = torch.zeros_like(mask)
    single[:, :3] = 1
    with pytest.warns(UserWarning, match=r"every row of this batch has at most one turn .* only rescales an outcome-level one"):
        run("rllm_gigpo", responses, single, rewards, index)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run("rllm_gigpo", responses, single, rewards, index)  # once
        run("rllm_gigpo", responses, mask, rewards, index)  # multi-turn rows: no warning


def test_verl_check_shows_the_discount_and_step_weight_it_resolved_and_where_they_came_from(monkeypatch):
    from rllm_verl.tools.check import verl_check

    example = Path(__file__).resolve().parents[3] / "examples" / "verl_multi_turn"
    monkeypatch.syspath_prepend(str(example))  # the corridor loop's module, as launch.sh's PYTHONPATH has it
    multi_turn = [
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={example / 'agent_loops.yaml'}",
        "actor_rollout_ref.rollout.agent.default_agent_loop=corridor",
    ]
    from_algorithm = verl_check(["algorithm.adv_estimator=rllm_gigpo", "algorithm.gamma=0.9", *multi_turn])
    assert "gamma=0.9 (from algorithm.gamma), step_advantage_w=1.0 (from the default)" in str(from_algorithm)
    assert not from_algorithm.warnings
    twice = verl_check(["algorithm.adv_estimator=rllm_gigpo", "algorithm.gamma=0.9", *multi_turn, "+algorithm.rllm_estimator_kwargs.gamma=0.5"])
    assert twice.errors == [
        "gamma is set twice with different values: algorithm.gamma=0.9 and algorithm.rllm_estimator_kwargs.gamma=0.5 "
        "(the estimator would take algorithm.rllm_estimator_kwargs.gamma); set it in one place"
    ]
    overridden = verl_check(
        [
            "algorithm.adv_estimator=rllm_gigpo",
            *multi_turn,
            "+algorithm.rllm_estimator_kwargs.gamma=0.5",
            "+algorithm.rllm_estimator_kwargs.step_advantage_w=0.25",
        ]
    )
    assert "gamma=0.5 (from algorithm.rllm_estimator_kwargs.gamma), step_advantage_w=0.25 (from algorithm.rllm_estimator_kwargs)" in str(overridden)
    single_turn = verl_check(["algorithm.adv_estimator=rllm_step_reinforce"])
    assert single_turn.ok and "this config is single-turn" in single_turn.warnings[0]


def reference_turn_grpo(turns, index, gamma, lam, ended="absorbing"):
    """(B, T) turn_grpo from the plain formula: the episode's GRPO plus lam times the turn's return against its turn's population."""
    groups = {}
    for r, uid in enumerate(index):
        groups.setdefault(uid, []).append(r)
    out = np.zeros((len(turns), max((p for t in turns for tok in t for p in tok[0]), default=0) + 1))
    for rows in groups.values():
        outcomes = [sum(t[1] for t in turns[r]) for r in rows]
        mean, sd = (0.0, 1.0) if len(rows) == 1 else (statistics.fmean(outcomes), statistics.pstdev(outcomes))
        returns = {}
        for r in rows:
            running, values = 0.0, []
            for k in reversed(range(len(turns[r]))):
                running = turns[r][k][1] + gamma * running
                values.append(running)
            returns[r] = values[::-1]
        for r, outcome in zip(rows, outcomes, strict=True):
            for k, (positions, _, _) in enumerate(turns[r]):
                population = [returns[q][k] if k < len(returns[q]) else 0.0 for q in rows if ended == "absorbing" or k < len(returns[q])]
                per_turn = 0.0 if len(population) == 1 else (returns[r][k] - statistics.fmean(population)) / (statistics.pstdev(population) + EPS)
                for p in positions:
                    out[r, p] = (outcome - mean) / (sd + EPS) + lam * per_turn
    return out


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("ended", ["absorbing", "present"])
def test_rllm_turn_grpo_equals_the_plain_formula(seed, ended):
    responses, mask, rewards, index = random_multi_turn_batch(np.random.default_rng(seed))
    kwargs = {"rllm_estimator_kwargs": {"lam": 0.5, "ended": ended}}
    advantages, _ = run("rllm_turn_grpo", responses, mask, rewards, index, gamma=0.9, **kwargs)
    want = reference_turn_grpo(reference_turns(responses, mask, rewards), index, 0.9, 0.5, ended)
    assert advantages.numpy()[:, : want.shape[1]] == pytest.approx(want, rel=1e-5, abs=1e-5)


def reference_turn_grpo_to_go(turns, index, gamma, lam):
    """(B, T) turn_grpo(value="reward_to_go", baseline="leave_one_out") plainly: every population centred on its other members'
    mean; a turn's part is the discounted sum over its own and every later turn index of the task group, 0 after the row's end."""
    groups = {}
    for r, uid in enumerate(index):
        groups.setdefault(uid, []).append(r)
    out = np.zeros((len(turns), max((p for t in turns for tok in t for p in tok[0]), default=0) + 1))

    def against_others(x, population, others):
        return 0.0 if len(population) == 1 else (x - statistics.fmean(others)) / (statistics.pstdev(population) + EPS)

    for rows in groups.values():
        outcomes = [sum(t[1] for t in turns[r]) for r in rows]
        horizon = max(len(turns[r]) for r in rows)
        z = {}
        for s in range(horizon):
            population = [turns[q][s][1] if s < len(turns[q]) else 0.0 for q in rows]
            for k, r in enumerate(rows):
                z[r, s] = against_others(population[k], population, population[:k] + population[k + 1 :])
        for k, r in enumerate(rows):
            episode = outcomes[k] / (1.0 + EPS) if len(rows) == 1 else against_others(outcomes[k], outcomes, outcomes[:k] + outcomes[k + 1 :])
            for t, (positions, _, _) in enumerate(turns[r]):
                to_go = sum(gamma ** (s - t) * z[r, s] for s in range(t, horizon))
                for p in positions:
                    out[r, p] = episode + lam * to_go
    return out


@pytest.mark.parametrize("seed", range(3))
def test_rllm_turn_grpo_reward_to_go_with_leave_one_out_equals_the_plain_formula(seed):
    responses, mask, rewards, index = random_multi_turn_batch(np.random.default_rng(seed))
    kwargs = {"rllm_estimator_kwargs": {"lam": 0.5, "value": "reward_to_go", "baseline": "leave_one_out"}}
    advantages, _ = run("rllm_turn_grpo", responses, mask, rewards, index, gamma=0.9, **kwargs)
    want = reference_turn_grpo_to_go(reference_turns(responses, mask, rewards), index, 0.9, 0.5)
    assert advantages.numpy()[:, : want.shape[1]] == pytest.approx(want, rel=1e-5, abs=1e-5)


def test_rllm_composite_is_the_weighted_sum_of_its_terms_through_verl():
    responses, mask, rewards, index = random_multi_turn_batch(np.random.default_rng(7))
    terms = [["grpo", 0.5], ["turn_grpo", 0.25, {"lam": 0.5}], ["step_reinforce", 2.0]]
    got, _ = run("rllm_composite", responses, mask, rewards, index, gamma=0.9, rllm_estimator_kwargs={"terms": terms})
    turns = reference_turns(responses, mask, rewards)
    grpo = reference_gigpo(turns, index, 0.9, 0.0)  # gigpo with w = 0: the episode's GRPO on every model token
    want = 0.5 * grpo + 0.25 * reference_turn_grpo(turns, index, 0.9, 0.5) + 2.0 * reference_gigpo(turns, index, 0.9, 1.0, steps_only=True)
    assert got.numpy()[:, : want.shape[1]] == pytest.approx(want, rel=1e-5, abs=1e-5)


def test_verl_check_passes_turn_grpo_and_composite_on_the_v1_trainer_and_refuses_bad_options():
    from rllm_verl.tools.check import verl_check

    assert verl_check(["algorithm.adv_estimator=rllm_turn_grpo", "+algorithm.rllm_estimator_kwargs.ended=present"]).ok
    assert verl_check(["algorithm.adv_estimator=rllm_composite", "+algorithm.rllm_estimator_kwargs.terms=[[grpo,0.5],[turn_grpo,0.5]]"]).ok
    bad = verl_check(["algorithm.adv_estimator=rllm_turn_grpo", "+algorithm.rllm_estimator_kwargs.ended=absorb"])
    assert not bad.ok and "ended must be one of ['absorbing', 'present']" in str(bad)
    to_go = ["algorithm.adv_estimator=rllm_turn_grpo", "+algorithm.rllm_estimator_kwargs.value=reward_to_go"]
    assert verl_check([*to_go, "+algorithm.rllm_estimator_kwargs.baseline=leave_one_out"]).ok
    present = verl_check([*to_go, "+algorithm.rllm_estimator_kwargs.ended=present"])
    assert not present.ok and "value='reward_to_go' sums a turn's term over every later turn index" in str(present)


@pytest.mark.parametrize(("algorithm_gamma", "terms"), [(1.0, [["gigpo", 1.0, {"gamma": 0.9}], ["grpo", 2.0]]), (0.9, [["gigpo", 1.0], ["grpo", 2.0]])])
def test_rllm_composite_of_gigpo_and_grpo_is_the_weighted_sum_of_plain_gigpo_and_grpo(algorithm_gamma, terms):
    """The anchored term reads the environment tokens as it does alone; its discount is its own, else verl's algorithm.gamma."""
    responses, mask, rewards, index = random_multi_turn_batch(np.random.default_rng(11))
    got, _ = run("rllm_composite", responses, mask, rewards, index, gamma=algorithm_gamma, rllm_estimator_kwargs={"terms": terms})
    turns = reference_turns(responses, mask, rewards)
    want = reference_gigpo(turns, index, 0.9, 1.0) + 2.0 * reference_gigpo(turns, index, 0.9, 0.0)
    assert got.numpy()[:, : want.shape[1]] == pytest.approx(want, rel=1e-5, abs=1e-5)
    assert (got[mask == 0] == 0).all()


@pytest.mark.parametrize("name", ["opo", "minus_length_weighted_mean", "verl_reinforce_plus_plus_baseline"])
def test_a_length_weighted_term_of_rllm_composite_gets_the_rows_response_lengths(name):
    """Inside composite the term gives what rllm_<term> gives alone (its lengths: response_mask summed), plus the other term."""
    responses, mask, rewards, index = random_multi_turn_batch(np.random.default_rng(5))
    got, _ = run("rllm_composite", responses, mask, rewards, index, rllm_estimator_kwargs={"terms": [[name, 1.0], ["grpo", 0.5]]})
    alone, _ = run(f"rllm_{name}", responses, mask, rewards, index)
    grpo, _ = run("rllm_grpo", responses, mask, rewards, index)
    assert got.numpy() == pytest.approx((alone + 0.5 * grpo).numpy(), rel=1e-5, abs=1e-5)
    lengths = mask.sum(-1).numpy()
    outcomes = rewards.sum(-1).numpy()
    if name == "opo":  # and by hand: r - the group's length-weighted mean reward, on every model token
        for r, uid in enumerate(index):
            rows = index == uid
            baseline = (lengths[rows] * outcomes[rows]).sum() / lengths[rows].sum()
            assert got[r][mask[r] == 1].numpy() - 0.5 * grpo[r][mask[r] == 1].numpy() == pytest.approx(outcomes[r] - baseline, abs=1e-5)


def test_a_stateful_term_of_rllm_composite_keeps_its_running_baseline_across_calls_as_rllm_rae_alone():
    from rllm_verl.compute.state import verl_estimator_state

    batches = [random_multi_turn_batch(np.random.default_rng(seed)) for seed in (1, 2, 3)]
    verl_estimator_state().clear()
    alone = [run("rllm_rae", *batch, rllm_estimator_kwargs={"decay": 0.5})[0] for batch in batches]
    rae_state = verl_estimator_state().get("rae", "all_groups")
    verl_estimator_state().clear()
    try:
        terms = [["rae", 1.0, {"decay": 0.5}]]
        inside = [run("rllm_composite", *batch, rllm_estimator_kwargs={"terms": terms})[0] for batch in batches]
        assert verl_estimator_state().get("composite", "all_groups") == {"terms": {"0:rae": rae_state}}
    finally:
        verl_estimator_state().clear()
    for got, want in zip(inside, alone, strict=True):
        assert got.numpy() == pytest.approx(want.numpy(), rel=1e-6, abs=1e-6)


def test_verl_check_refuses_a_composite_term_whose_k_reaches_the_group_size():
    from rllm_verl.tools.check import verl_check

    report = verl_check(
        ["algorithm.adv_estimator=rllm_composite", "actor_rollout_ref.rollout.n=4", "+algorithm.rllm_estimator_kwargs.terms=[[grpo,1.0],[pkpo,1.0,{k:4}]]"]
    )
    assert not report.ok and "term 1 ('pkpo'): estimator 'pkpo': k=4 is not below the group size 4" in str(report)
    assert verl_check(["algorithm.adv_estimator=rllm_composite", "+algorithm.rllm_estimator_kwargs.terms=[[gigpo,1.0],[grpo,2.0]]"]).ok


ONE_TERM_OPTIONS = {"pkpo": {"k": 2}, "passk_training": {"k": 2}, "rae": {"decay": 0.5}, "gigpo": {"gamma": 0.9}}


# a value-based estimator's returns are a critic's targets, which a sum of terms has not: composite refuses it (tests/steps)
@pytest.mark.parametrize("name", sorted(n for n in available_estimators() if n != "composite" and not get_estimator_spec(n).needs_values))
def test_a_one_term_rllm_composite_is_rllm_term_alone(name):
    """For every registered estimator: rllm_composite([[e, 1.0, opts]]) gives what rllm_<e> gives with opts, on multi-turn rows."""
    from rllm_verl.compute.state import verl_estimator_state

    responses, mask, rewards, index = random_multi_turn_batch(np.random.default_rng(3))
    options = ONE_TERM_OPTIONS.get(name, {})
    verl_estimator_state().clear()
    try:
        alone, _ = run(f"rllm_{name}", responses, mask, rewards, index, rllm_estimator_kwargs=options)
        inside, _ = run("rllm_composite", responses, mask, rewards, index, rllm_estimator_kwargs={"terms": [[name, 1.0, options]]})
    finally:
        verl_estimator_state().clear()
    assert inside.numpy() == pytest.approx(alone.numpy(), rel=1e-6, abs=1e-6)


def test_one_call_asks_what_the_estimator_reads_once():
    from rllm_verl.compute.outcome import compute_rllm_advantage

    from rllm_plugins.discovery import manager
    from rllm_plugins.needs import Needs
    from rllm_plugins.spec import AdvEstimatorSpec, Estimator, Provider

    asked = []

    def needs_for(options):
        asked.append(dict(options))
        return Needs(anchors=True)

    def centred(batch, /, **_):
        return batch.step_rewards - batch.step_rewards.mean()

    spec = AdvEstimatorSpec("asks_needs", batched=centred, level="step", needs_for=needs_for)
    manager.add_user_estimator(Estimator(spec, Provider("test_step_level", kind="user")))
    try:
        responses, mask, rewards, index = random_multi_turn_batch(np.random.default_rng(0))
        advantages, _ = compute_rllm_advantage("asks_needs", rewards, mask, index, OmegaConf.create({"gamma": 1.0}), responses=responses)
    finally:
        manager.remove_user_estimator("asks_needs")
    assert len(asked) == 1  # anchors, lengths, state and values: one answer for the whole call
    turns = reference_turns(responses, mask, rewards)
    mean = statistics.fmean(reward for row in turns for _, reward, _ in row)
    want = torch.zeros_like(mask)
    for r, row in enumerate(turns):
        for positions, reward, _ in row:
            want[r, positions] = reward - mean
    assert torch.allclose(advantages, want, atol=1e-6)
