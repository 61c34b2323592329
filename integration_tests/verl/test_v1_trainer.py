"""verl's own v1 ``PPOTrainer._compute_advantage`` with a real TransferQueue on a local Ray, for ``rllm_*`` estimators.

Rows are stored as verl's v1 agent loop stores them (``AgentLoopOutput.as_dict()`` per output, keys
``{uid}_{session}_{index}``, ``list_of_dict_to_tensordict``, partition ``train``), the batch goes through verl's own
``_balance_batch`` (padding rows with ``response_mask`` all 0 and uid ``pad…``, then rows reordered), the trainer is
verl's ``PPOTrainerSync`` with verl's composed Hydra config (nothing else is built: ``_compute_advantage``
reads only the config and TransferQueue), and the advantages are read back from TransferQueue. The
reference is written plainly here: turns token by token, GiGPO's formulas with dicts.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
tq = pytest.importorskip("transfer_queue", reason="verl's v1 trainer needs TransferQueue")
ray = pytest.importorskip("ray")

EPS = 1e-6


@pytest.fixture(scope="module")
def transfer_queue():
    """A local Ray with TransferQueue's controller and storage (its default storage needs three CPUs)."""
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    tq.init()
    yield tq
    tq.close()
    ray.shutdown()


def trainer_for(*overrides: str):
    """verl's v1 sync trainer with verl's own composed config; ``_compute_advantage`` reads nothing else."""
    from rllm_verl.tools.check import _compose
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    trainer = PPOTrainerSync.__new__(PPOTrainerSync)
    trainer.config = _compose(["actor_rollout_ref.rollout.n=4", *overrides], "ppo_trainer", None)
    return trainer


def episode(rng, turns: int, vocab: int = 2):
    """One output: ``turns`` model turns separated by 1-2 environment tokens from a small vocabulary (so states repeat)."""
    response, mask = [], []
    for k in range(turns):
        if k:
            env = rng.integers(3, 3 + vocab, size=int(rng.integers(1, 3))).tolist()
            response += env
            mask += [0] * len(env)
        n = int(rng.integers(1, 4))
        response += [10 + k] * n
        mask += [1] * n
    return response, mask


def store(rows, partition="train", pad=3):
    """Put ``rows`` into TransferQueue as verl's v1 agent loop does (:func:`rllm_verl.conformance.v1.put_agent_loop_rows`).

    Returns verl's ``KVBatchMeta`` after verl's own ``PPOTrainer._balance_batch`` (``pad`` > 0): padded with ``pad`` rows
    and reordered into balanced partitions, as the trainer does before computing advantages.
    """
    from rllm_verl.conformance.v1 import put_agent_loop_rows

    balanced = put_agent_loop_rows(tq, rows, partition, pad, trainer_for().config)
    if pad:
        assert balanced.keys[: len(rows)] != [row["key"] for row in rows] or len(rows) < 3, "balancing reorders the rows"
    return balanced


def advantages_of(batch):
    """The advantages ``_compute_advantage`` wrote to TransferQueue, one 1-D tensor per key."""
    return list(tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["advantages"])["advantages"].unbind(0))


def compute(trainer, batch):
    metrics: dict[str, float] = {}
    batch = trainer._compute_advantage(batch, metrics=metrics)
    return advantages_of(batch), metrics


def turns_of(row):
    """``[(positions, reward up to the next turn, anchor)]`` read token by token; anchors: environment tokens before, turn 0 "prompt"."""
    mask, response = row["mask"], row["response"]
    rewards = [0.0] * len(mask)
    rewards[-1] = row["reward"]  # verl's v1 agent loop puts the score on the last token
    starts = [t for t in range(len(mask)) if mask[t] and (t == 0 or not mask[t - 1])]
    turns = []
    for k, start in enumerate(starts):
        end = start
        while end < len(mask) and mask[end]:
            end += 1
        segment_end = starts[k + 1] if k + 1 < len(starts) else len(mask)
        reward = sum(rewards[0 if k == 0 else start : segment_end])
        anchor = "prompt" if k == 0 else tuple(response[turns[-1][0][-1] + 1 : start])
        turns.append((list(range(start, end)), reward, anchor))
    return turns


def reference(rows, gamma, w, steps_only=False, anchors_of=None):
    """GiGPO (``steps_only``: step_reinforce) per key from the formulas: sessions are episodes, their outputs' turns in index order.

    With sessions of several outputs, every output's first turn is anchored at its own prompt; ``anchors_of(row)``
    overrides a row's anchors.
    """
    sessions = defaultdict(list)
    for row in rows:
        _uid_part, session, index = row["key"].rsplit("_", 2)
        sessions[(row["uid"], session)].append((int(index), row))
    several = any(len(outs) > 1 for outs in sessions.values())
    steps_of = {}
    for key, outs in sessions.items():
        outs.sort(key=lambda pair: pair[0])
        steps = []
        for _, row in outs:
            turns = turns_of(row)
            if anchors_of is not None:
                turns = [(p, r, a) for (p, r, _), a in zip(turns, anchors_of(row), strict=True)]
            elif several and turns:
                turns[0] = (turns[0][0], turns[0][1], ("prompt", *row["prompt"]))
            steps += [(row["key"], *turn) for turn in turns]
        steps_of[key] = (steps, outs[-1][1]["reward"])
    by_uid = defaultdict(list)
    for (uid, _), (steps, outcome) in steps_of.items():
        if steps:
            by_uid[uid].append((steps, outcome))
    out = {}
    for episodes in by_uid.values():
        outcomes = [o for _, o in episodes]
        mean, sd = (0.0, 1.0) if len(outcomes) == 1 else (statistics.fmean(outcomes), statistics.pstdev(outcomes))
        returns, members = {}, defaultdict(list)
        for e, (steps, _) in enumerate(episodes):
            running = 0.0
            for s in reversed(range(len(steps))):
                running = steps[s][2] + gamma * running
                returns[(e, s)] = running
            for s, step in enumerate(steps):
                members["all" if steps_only else step[3]].append(returns[(e, s)])
        for e, (steps, outcome) in enumerate(episodes):
            for s, (key, positions, _, anchor) in enumerate(steps):
                group = members["all" if steps_only else anchor]
                relative = 0.0 if len(group) == 1 else (returns[(e, s)] - statistics.fmean(group)) / (statistics.pstdev(group) + EPS)
                value = relative if steps_only else (outcome - mean) / (sd + EPS) + w * relative
                out.setdefault(key, {}).update(dict.fromkeys(positions, value))
    return out


def assert_matches(got, batch, rows, want):
    """Every real key's advantages equal ``want`` (0 off its turns); every padding row's are 0."""
    by_key = dict(zip(batch.keys, got, strict=True))
    for row in rows:
        expected = np.zeros(len(row["response"]))
        for position, value in want.get(row["key"], {}).items():
            expected[position] = value
        assert by_key[row["key"]].numpy() == pytest.approx(expected, rel=1e-5, abs=1e-5), row["key"]
    padding = [k for k in batch.keys if k.startswith("pad")]
    assert padding, "the batch must hold verl's padding rows"
    assert all(torch.count_nonzero(by_key[k]) == 0 for k in padding)


def multi_turn_rows(rng, uids=("task_a", "task_b"), sessions=4, outputs=(1,), extra=None):
    rows = []
    for u, uid in enumerate(uids):
        for s in range(sessions):
            for index in range(int(rng.choice(outputs))):
                response, mask = episode(rng, int(rng.integers(1, 4)))
                prompt = [20 + u] * 3 if index == 0 else [30 + int(rng.integers(0, 2))] * 2  # a later output starts from an observation
                row = {"key": f"{uid}_{s}_{index}", "uid": uid, "prompt": prompt, "response": response, "mask": mask}
                row["reward"] = float(rng.choice([0.0, 0.5, 1.0]))
                row["extra"] = extra(row) if extra else {}
                rows.append(row)
    # v1 copies the final output's score to every output of its session
    final = {}
    for row in rows:
        final[row["key"].rsplit("_", 1)[0]] = row["reward"]
    for row in rows:
        row["reward"] = final[row["key"].rsplit("_", 1)[0]]
    return rows


def test_the_v1_extension_wraps_verls_method_once():
    import verl.trainer.ppo.v1.trainer_base as trainer_base
    from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
    from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    method = trainer_base.PPOTrainer._compute_advantage
    assert method.rllm_extension == "v1_batch"
    assert method.__wrapped__.__code__.co_filename == trainer_base.__file__
    for trainer in (PPOTrainerSync, PPOTrainerColocateAsync, PPOTrainerSeparateAsync):  # all inherit it
        assert trainer._compute_advantage is method


@pytest.mark.parametrize("name", ["rllm_grpo", "rllm_rloo"])
def test_outcome_estimators_on_padded_rows_and_sessions(transfer_queue, name):
    rng = np.random.default_rng(0)
    rows = multi_turn_rows(rng, uids=("q_1", "q_2", "q_3"), sessions=3, outputs=(1, 2))
    batch = store(rows)
    got, _ = compute(trainer_for(f"algorithm.adv_estimator={name}"), batch)
    sessions = defaultdict(dict)
    for row in rows:
        sessions[row["uid"]][row["key"].rsplit("_", 1)[0]] = row["reward"]
    want = {}
    for _uid, of_session in sessions.items():
        r = np.array(list(of_session.values()))
        if name == "rllm_grpo":
            a = (r - r.mean()) / (r.std() + EPS) if r.size > 1 else r / (1 + EPS)
        else:
            a = np.array([r[i] - np.delete(r, i).mean() for i in range(r.size)]) if r.size > 1 else r
        for session, value in zip(of_session, a, strict=True):
            for row in rows:
                if row["key"].rsplit("_", 1)[0] == session:
                    want[row["key"]] = {p: value for p, m in enumerate(row["mask"]) if m}
    assert_matches(got, batch, rows, want)


@pytest.mark.parametrize(("name", "outputs"), [("rllm_gigpo", (1,)), ("rllm_gigpo", (1, 2, 3)), ("rllm_step_reinforce", (1, 2))])
def test_step_level_estimators_read_anchors_from_transfer_queue(transfer_queue, name, outputs):
    rng = np.random.default_rng(len(outputs))
    rows = multi_turn_rows(rng, outputs=outputs)
    batch = store(rows)
    weight = [] if name == "rllm_step_reinforce" else ["+algorithm.rllm_estimator_kwargs.step_advantage_w=0.5"]
    got, metrics = compute(trainer_for(f"algorithm.adv_estimator={name}", "algorithm.gamma=0.9", *weight), batch)
    want = reference(rows, gamma=0.9, w=0.5, steps_only=name == "rllm_step_reinforce")
    assert_matches(got, batch, rows, want)
    # per-turn metrics: turn t of an episode (a session: its outputs' turns in index order), by hand
    episodes = defaultdict(list)
    for row in sorted(rows, key=lambda r: int(r["key"].rsplit("_", 1)[1])):
        for positions, reward, _ in turns_of(row):
            episodes[row["key"].rsplit("_", 1)[0]].append((want[row["key"]][positions[0]], reward))
    by_turn = defaultdict(list)
    for steps in episodes.values():
        for t, step in enumerate(steps[:3]):
            by_turn[str(t)].append(step)
        by_turn["last"].append(steps[-1])
    for label, steps in by_turn.items():
        assert metrics[f"rllm/turn/{label}/advantage_mean"] == pytest.approx(statistics.fmean(a for a, _ in steps), abs=1e-5)
        assert metrics[f"rllm/turn/{label}/reward_mean"] == pytest.approx(statistics.fmean(r for _, r in steps), abs=1e-6)
    assert metrics["rllm/turn/count_mean"] == pytest.approx(statistics.fmean(len(steps) for steps in episodes.values()))


def test_an_agent_loop_override_in_extra_fields_replaces_the_token_anchors(transfer_queue):
    def states(row):
        turns = sum(1 for t, m in enumerate(row["mask"]) if m and (t == 0 or not row["mask"][t - 1]))
        return {"anchor_states": [f"room-{k % 2}" for k in range(turns)]}

    rows = multi_turn_rows(np.random.default_rng(7), extra=states)
    batch = store(rows)
    got, _ = compute(trainer_for("algorithm.adv_estimator=rllm_gigpo"), batch)
    assert_matches(got, batch, rows, reference(rows, gamma=1.0, w=1.0, anchors_of=lambda row: row["extra"]["anchor_states"]))


def test_a_third_party_step_level_plugin_that_reads_anchors(transfer_queue):
    """Registered in user code (the same registry entry points fill): the step reward minus its anchor group's mean."""
    from rllm_verl.registration import register_estimators_into_verl

    from rllm_plugins import register_rllm_adv_estimator, unregister_rllm_adv_estimator

    def anchor_mean_baseline(batch, /, **_):
        means = np.bincount(batch.anchors, batch.step_rewards) / np.bincount(batch.anchors)
        return batch.step_rewards - means[batch.anchors]

    register_rllm_adv_estimator("anchor_mean_baseline", batched=anchor_mean_baseline, level="step", needs_anchors=True)(lambda *a, **k: None)
    try:
        register_estimators_into_verl()
        rows = multi_turn_rows(np.random.default_rng(8), outputs=(1, 2))
        batch = store(rows)
        got, _ = compute(trainer_for("algorithm.adv_estimator=rllm_anchor_mean_baseline"), batch)
    finally:  # the registry is the process's: later tests (the conformance matrix's table) must not see it
        unregister_rllm_adv_estimator("anchor_mean_baseline")
    # the reference: every step's own reward minus the mean step reward of its (task, anchor) group
    sessions = defaultdict(list)
    for row in rows:
        sessions[(row["uid"], row["key"].rsplit("_", 2)[1])].append(row)
    members, steps = defaultdict(list), []
    for (uid, _), outs in sessions.items():
        outs.sort(key=lambda r: int(r["key"].rsplit("_", 1)[1]))
        for row in outs:
            for k, (positions, reward, anchor) in enumerate(turns_of(row)):
                anchor = ("prompt", *row["prompt"]) if k == 0 else anchor
                members[(uid, anchor)].append(reward)
                steps.append((row["key"], positions, reward, (uid, anchor)))
    want = defaultdict(dict)
    for key, positions, reward, group in steps:
        want[key].update(dict.fromkeys(positions, reward - statistics.fmean(members[group])))
    assert_matches(got, batch, rows, want)


def test_gdpo_reward_keys_reach_rllm_estimators_on_v1_from_reward_extra_info(transfer_queue):
    rng = np.random.default_rng(9)

    def scores(_row):
        return {"reward_extra_info": {"acc": float(rng.integers(0, 2)), "fmt": 0.5 * float(rng.integers(0, 3))}}

    rows = multi_turn_rows(rng, uids=("k_1", "k_2"), sessions=4, extra=scores)
    batch = store(rows)
    keys = ["+algorithm.gdpo_reward_keys=[acc,fmt]", "+algorithm.rllm_multi_objective_aggregation=sum_then_normalize"]
    got, _ = compute(trainer_for("algorithm.adv_estimator=rllm_rloo", *keys), batch)
    want = {}
    for uid in ("k_1", "k_2"):
        members = [row for row in rows if row["uid"] == uid]
        r = np.array([row["extra"]["reward_extra_info"]["acc"] + row["extra"]["reward_extra_info"]["fmt"] for row in members])
        a = np.array([r[i] - np.delete(r, i).mean() for i in range(r.size)])
        for row, value in zip(members, a, strict=True):
            want[row["key"]] = {p: value for p, m in enumerate(row["mask"]) if m}
    assert_matches(got, batch, rows, want)


def test_with_the_extension_off_a_step_level_estimator_that_needs_anchors_says_what_to_set(transfer_queue, monkeypatch):
    import verl.trainer.ppo.v1.trainer_base as trainer_base

    rows = multi_turn_rows(np.random.default_rng(10))
    batch = store(rows, pad=0)
    trainer = trainer_for("algorithm.adv_estimator=rllm_gigpo")
    monkeypatch.setattr(trainer_base.PPOTrainer, "_compute_advantage", trainer_base.PPOTrainer._compute_advantage.__wrapped__)  # as if opted out
    with pytest.raises(ValueError, match=r"needs `responses` to form anchor states.*RLLM_PLUGINS_VERL_V1_BATCH"):
        trainer._compute_advantage(batch, metrics={})


def test_the_recipes_agent_loop_sets_anchor_states_that_reach_rllm_gigpo_on_v1(transfer_queue):
    """examples/verl_multi_turn: the corridor agent loop's outputs, stored as v1 stores them, give GiGPO over its anchor states.

    The rollout server is a stand-in (a GPU rollout cannot run here): a scripted policy that writes ``+`` or ``-``.
    """
    import asyncio
    import importlib
    import sys
    from pathlib import Path

    from verl.workers.rollout.replica import TokenOutput

    from rllm_plugins.tiny import build_tiny_tokenizer

    sys.path.insert(0, str(Path(__file__).parents[2] / "examples" / "verl_multi_turn"))
    try:
        recipe = importlib.import_module("anchored_agent_loop")
    finally:
        sys.path.pop(0)
    tokenizer = build_tiny_tokenizer(["walk the corridor + - cell 0 1 2 3 4 ."] * 4)
    rng = np.random.default_rng(11)

    class ScriptedServer:
        async def generate(self, *, request_id, prompt_ids, sampling_params, **_):
            return TokenOutput(token_ids=tokenizer.encode(str(rng.choice(["+", "-", "++"])), add_special_tokens=False))

    loop = recipe.CorridorAgentLoop.__new__(recipe.CorridorAgentLoop)  # run() reads only these two
    loop.server_manager, loop.tokenizer = ScriptedServer(), tokenizer
    rows = []
    for uid in ("walk_a", "walk_b"):
        for session in range(6):
            output = asyncio.run(loop.run({}, raw_prompt=[{"role": "user", "content": "walk the corridor"}]))
            rows.append(
                {
                    "key": f"{uid}_{session}_0",
                    "uid": uid,
                    "prompt": output.prompt_ids,
                    "response": output.response_ids,
                    "mask": output.response_mask,
                    "reward": output.reward_score,
                    "extra": output.extra_fields,
                }
            )
    assert len({s for row in rows for s in row["extra"]["anchor_states"]}) > 2, "episodes must reach several cells"
    assert len({row["reward"] for row in rows}) == 2, "some episodes must reach the goal"
    batch = store(rows)
    got, _ = compute(trainer_for("algorithm.adv_estimator=rllm_gigpo", "algorithm.gamma=0.95"), batch)
    assert_matches(got, batch, rows, reference(rows, gamma=0.95, w=1.0, anchors_of=lambda row: row["extra"]["anchor_states"]))


def test_rows_other_than_the_v1_batchs_are_refused_naming_both_counts():
    """A DataProto that is not the one _compute_advantage built (other rows, or rows in another order) cannot borrow its token ids."""
    from rllm_verl.context import V1Batch, fetch_rows, serving

    served = {"uid": ["a", "b"], "prompts": [torch.tensor([1])] * 2, "responses": [torch.tensor([2])] * 2, "extra_fields": [{}, {}]}
    with serving(V1Batch(["a_0_0", "b_0_0"], lambda fields: {f: served[f] for f in fields})):
        assert fetch_rows(np.array(["a", "b"], dtype=object), "here").uids.tolist() == ["a", "b"]
        for index in (["a", "b", "c"], ["b", "a"]):
            with pytest.raises(ValueError, match=rf"here: the batch has {len(index)} rows, but verl's v1 advantage step is processing 2 keys with other uids"):
                fetch_rows(np.array(index, dtype=object), "here")
    assert fetch_rows(np.array(["a", "b"], dtype=object), "here") is None  # outside a v1 advantage step


def served_step(rows, fn):
    """Run ``fn`` inside a v1 advantage step whose ``rows`` (dicts: uid, prompt, response, extra) are served from memory."""
    from rllm_verl.context import V1Batch, serving

    served = {
        "uid": [r["uid"] for r in rows],
        "prompts": [torch.tensor(r["prompt"]) for r in rows],
        "responses": [torch.tensor(r["response"]) for r in rows],
        "extra_fields": [r["extra"] for r in rows],
    }
    with serving(V1Batch([f"{r['uid']}_{i}_0" for i, r in enumerate(rows)], lambda fields: {f: served[f] for f in fields})):
        return fn()


def v1_call(rows, name, **algorithm):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    width = max(len(r["response"]) for r in rows)
    mask = torch.tensor([r["mask"] + [0] * (width - len(r["mask"])) for r in rows])
    rewards = torch.zeros(mask.shape)
    rewards[:, 0] = torch.tensor([float(r["reward"]) for r in rows])
    index = np.array([r["uid"] for r in rows], dtype=object)
    config = OmegaConf.create({"gamma": 1.0, "norm_adv_by_std_in_grpo": True, **algorithm})
    return served_step(rows, lambda: get_adv_estimator_fn(name)(token_level_rewards=rewards, response_mask=mask, index=index, config=config))


def test_anchor_states_on_some_outputs_only_are_refused_naming_the_row():
    rows = [
        {"uid": "u", "prompt": [1], "response": [7, 3, 8], "mask": [1, 0, 1], "reward": 1.0, "extra": {"anchor_states": ["a", "b"]}},
        {"uid": "u", "prompt": [1], "response": [7, 4, 8], "mask": [1, 0, 1], "reward": 0.0, "extra": {}},
    ]
    with pytest.raises(ValueError, match=r"'rllm_gigpo': row 1 \(uid 'u'\) has no extra_fields\['anchor_states'\] while other rows have one"):
        v1_call(rows, "rllm_gigpo")


def test_a_reward_key_no_row_reports_on_v1_is_named():
    rows = [{"uid": "u", "prompt": [1], "response": [7], "mask": [1], "reward": r, "extra": {"reward_extra_info": {"acc": r}}} for r in (1.0, 0.0)]
    advantages, _ = v1_call(rows, "rllm_rloo", gdpo_reward_keys=["acc"], rllm_multi_objective_aggregation="sum_then_normalize")
    assert advantages[:, 0].tolist() == [1.0, -1.0]  # rloo of the scores read from reward_extra_info
    with pytest.raises(ValueError, match=r"reward key 'fmt' of algorithm.gdpo_reward_keys is not in the batch"):
        v1_call(rows, "rllm_rloo", gdpo_reward_keys=["acc", "fmt"])


@pytest.mark.parametrize("outputs", [(1,), (1, 2)])
def test_rllm_composite_of_gigpo_and_grpo_on_padded_reordered_rows_is_the_weighted_sum(transfer_queue, outputs):
    """composite([["gigpo", 1.0, {"gamma": 0.9}], ["grpo", 2.0]]) on v1: anchors from TransferQueue, padding rows 0."""
    rng = np.random.default_rng(20 + len(outputs))
    rows = multi_turn_rows(rng, outputs=outputs)
    batch = store(rows)
    terms = "[[gigpo,1.0,{gamma:0.9}],[grpo,2.0]]"
    got, _ = compute(trainer_for("algorithm.adv_estimator=rllm_composite", f"+algorithm.rllm_estimator_kwargs.terms={terms}"), batch)
    gigpo, grpo = reference(rows, gamma=0.9, w=1.0), reference(rows, gamma=0.9, w=0.0)  # gigpo with w = 0: the episode's GRPO
    want = {key: {p: gigpo[key][p] + 2.0 * grpo[key][p] for p in positions} for key, positions in gigpo.items()}
    assert_matches(got, batch, rows, want)


@pytest.mark.parametrize("outputs", [(1,), (1, 2)])
def test_rllm_turn_gae_reads_the_critics_values_from_transfer_queue_and_writes_its_returns(transfer_queue, outputs):
    """Values stored as verl's ``_compute_values`` leaves them (nested, one per response token), padded rows included."""
    from tensordict import TensorDict

    rng = np.random.default_rng(20 + len(outputs))
    rows = multi_turn_rows(rng, outputs=outputs)
    batch = store(rows)
    lengths = [len(m) for m in tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["response_mask"])["response_mask"].unbind(0)]
    values = {key: rng.normal(size=n).round(3) for key, n in zip(batch.keys, lengths, strict=True)}
    nested = torch.nested.as_nested_tensor([torch.tensor(values[k], dtype=torch.float32) for k in batch.keys], layout=torch.jagged)
    tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=TensorDict({"values": nested}, batch_size=len(batch.keys)))
    trainer = trainer_for("algorithm.adv_estimator=rllm_turn_gae", "critic.enable=true", "algorithm.gamma=0.9", "algorithm.lam=0.8")
    got, _ = compute(trainer, batch)
    returns = list(tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["returns"])["returns"].unbind(0))
    # the reference: a session is one episode of its outputs' turns in index order; GAE over its turns; whitened over model tokens
    sessions = defaultdict(list)
    for row in rows:
        sessions[row["key"].rsplit("_", 1)[0]].append(row)
    steps = []  # (key, positions, advantage, return)
    for outs in sessions.values():
        outs.sort(key=lambda r: int(r["key"].rsplit("_", 1)[1]))
        turns = [(row["key"], positions, reward, float(np.float32(values[row["key"]][positions[0]]))) for row in outs for positions, reward, _ in turns_of(row)]
        running, gae = 0.0, [0.0] * len(turns)
        for t in reversed(range(len(turns))):
            following = turns[t + 1][3] if t + 1 < len(turns) else 0.0
            running = turns[t][2] + 0.9 * following - turns[t][3] + 0.9 * 0.8 * running
            gae[t] = running
        steps += [(key, positions, a, a + v) for (key, positions, _, v), a in zip(turns, gae, strict=True)]
    tokens = [a for _, positions, a, _ in steps for _ in positions]
    mean = statistics.fmean(tokens)
    scale = (statistics.variance(tokens) + 1e-8) ** -0.5
    want, want_returns = defaultdict(dict), defaultdict(dict)
    for key, positions, a, ret in steps:
        want[key].update(dict.fromkeys(positions, (a - mean) * scale))
        want_returns[key].update(dict.fromkeys(positions, ret))
    assert_matches(got, batch, rows, want)
    assert_matches(returns, batch, rows, want_returns)


def test_similarity_anchors_on_v1_are_verl_agents_clusters_on_rows_in_rollout_order(transfer_queue):
    """_balance_batch reorders the rows; the keys' session and index give the rollout order the clusters are formed in."""
    from difflib import SequenceMatcher

    chain = ["abcdefghij", "abcdefghXY", "abcdefWXYZ", "abcdVWXYZ!"]  # neighbours similar at 0.8, the ends not
    pick = np.random.default_rng(31)

    def states(row):
        turns = sum(1 for t, m in enumerate(row["mask"]) if m and (t == 0 or not row["mask"][t - 1]))
        return {"anchor_states": [chain[int(i)] for i in pick.integers(0, len(chain), turns)]}

    rows = multi_turn_rows(np.random.default_rng(30), sessions=6, extra=states)
    batch = store(rows)
    got, _ = compute(trainer_for("algorithm.adv_estimator=rllm_gigpo", "+algorithm.rllm_estimator_kwargs.anchor_similarity=0.8"), batch)
    labels = {}
    for uid in ("task_a", "task_b"):  # verl-agent: visit the steps in rollout order (sessions, then turns), first match wins
        firsts = []
        for row in sorted((r for r in rows if r["uid"] == uid), key=lambda r: int(r["key"].rsplit("_", 2)[1])):
            for k, state in enumerate(row["extra"]["anchor_states"]):
                match = next((c for c, first in enumerate(firsts) if SequenceMatcher(None, state, first).ratio() >= 0.8), None)
                if match is None:
                    firsts.append(state)
                    match = len(firsts) - 1
                labels[(row["key"], k)] = match
    assert_matches(got, batch, rows, reference(rows, gamma=1.0, w=1.0, anchors_of=lambda row: [labels[(row["key"], k)] for k in range(len(turns_of(row)))]))


def rae_reference(rows, baseline, decay):
    """prime-rl's loop over the sessions (a session: its final output's reward), scanned by uid (as a string), then by session id.

    That order is the rollouts' own: verl's padding and balancing cannot change it. Returns the advantage of each key's
    model tokens and the baseline after.
    """
    finals = {}  # "{uid}_{session}" -> (uid, session id, final output's index, reward)
    for row in rows:
        head, index = row["key"].rsplit("_", 1)
        if head not in finals or int(index) > finals[head][2]:
            finals[head] = (row["uid"], int(head.rsplit("_", 1)[1]), int(index), row["reward"])
    value_of = {}
    for head in sorted(finals, key=lambda h: (str(finals[h][0]), finals[h][1])):
        reward = finals[head][3]
        value_of[head] = reward - baseline
        baseline = decay * baseline + (1 - decay) * reward
    want = {row["key"]: {p: value_of[row["key"].rsplit("_", 1)[0]] for p, m in enumerate(row["mask"]) if m} for row in rows}
    return want, baseline


@pytest.mark.parametrize("outputs", [(1,), (1, 2, 3)], ids=["one output per session (row path)", "sessions of several outputs"])
def test_rllm_rae_on_padded_and_reordered_rows_skips_padding_and_continues_across_steps(transfer_queue, outputs):
    from rllm_verl.compute.state import verl_estimator_state

    verl_estimator_state().clear()
    trainer = trainer_for("algorithm.adv_estimator=rllm_rae", "+algorithm.rllm_estimator_kwargs.decay=0.5")
    baseline = 0.0
    try:
        for step in range(2):
            rng = np.random.default_rng(20 + step)
            rows = multi_turn_rows(rng, uids=(f"s{step}_a", f"s{step}_b", f"s{step}_c"), sessions=3, outputs=outputs)
            if len(outputs) > 1:
                assert len({r["key"].rsplit("_", 1)[0] for r in rows}) < len(rows), "a session must have several outputs"
            batch = store(rows, partition=f"rae{step}{len(outputs)}")
            got, _ = compute(trainer, batch)
            want, baseline = rae_reference(rows, baseline, 0.5)
            assert_matches(got, batch, rows, want)
            (state,) = verl_estimator_state().state_dict()["estimators"]["rae"].values()
            assert state == {"baseline": pytest.approx(baseline, abs=1e-12)}  # padding rows never touched it
    finally:
        verl_estimator_state().clear()


@pytest.mark.parametrize("outputs", [(1,), (1, 2)], ids=["row path", "sessions"])
def test_rllm_rae_on_v1_does_not_depend_on_how_verl_balanced_or_padded_the_rows(transfer_queue, outputs):
    """The same rollouts stored in another order and balanced over another data-parallel size: the same advantages and state."""
    from rllm_verl.compute.state import verl_estimator_state

    trainer = trainer_for("algorithm.adv_estimator=rllm_rae", "+algorithm.rllm_estimator_kwargs.decay=0.5")
    rows = multi_turn_rows(np.random.default_rng(7), uids=("u_b", "u_a", "u_c"), sessions=3, outputs=outputs)
    results = []
    try:
        for k, (order, pad) in enumerate([(rows, 3), (rows[::-1], 5), (rows[1::2] + rows[::2], 0)]):
            verl_estimator_state().clear()
            batch = store(order, partition=f"raeorder{k}{len(outputs)}", pad=pad)
            got, _ = compute(trainer, batch)
            by_key = {key: got[batch.keys.index(key)].tolist() for key in (row["key"] for row in rows)}
            results.append((by_key, verl_estimator_state().state_dict()["estimators"]["rae"]))
    finally:
        verl_estimator_state().clear()
    assert results[0] == results[1] == results[2]


def plain_role_level(name: str, groups: dict[str, list[float]]) -> dict[str, list[float]]:
    """Role- and batch-level estimators over the real sessions only (each uid's session rewards), written plainly."""
    flat = [r for rs in groups.values() for r in rs]
    mean_all, pstd_all, sstd_all = statistics.fmean(flat), statistics.pstdev(flat), statistics.stdev(flat)
    centred = {u: [r - (statistics.fmean(rs) if len(rs) > 1 else 0.0) for r in rs] for u, rs in groups.items()}
    if name == "rllm_reinforce_plus_plus_baseline":
        c_flat = [c for cs in centred.values() for c in cs]
        m, s = statistics.fmean(c_flat), statistics.pstdev(c_flat)
        return {u: [(c - m) / (s + EPS) for c in cs] for u, cs in centred.items()}
    if name in ("rllm_prpo", "rllm_prpo_std_optional"):
        return {u: [(r - mean_all) / (pstd_all + EPS) for r in rs] for u, rs in groups.items()}
    if name in ("rllm_trl_grpo_batch", "rllm_trl_grpo"):  # (r - group mean) / (sample std of every reward + 1e-4)
        return {u: [(r - statistics.fmean(rs)) / (sstd_all + 1e-4) for r in rs] for u, rs in groups.items()}
    assert name == "rllm_gpg"  # alpha = N / (rewards that are not 0), N the real sessions: padding is no sample
    alpha = len(flat) / max(sum(1 for r in flat if r != 0), 1)
    return {u: [alpha * c for c in cs] for u, cs in centred.items()}


@pytest.mark.parametrize("outputs", [(1,), (1, 2)], ids=["one output each", "sessions"])
@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("rllm_reinforce_plus_plus_baseline", ()),
        ("rllm_prpo", ()),
        ("rllm_prpo_std_optional", ()),
        ("rllm_trl_grpo_batch", ()),
        ("rllm_trl_grpo", ("+algorithm.rllm_estimator_kwargs.scale_rewards=batch",)),
        ("rllm_gpg", ()),
    ],
)
def test_padding_rows_stay_out_of_role_level_statistics(transfer_queue, name, options, outputs):
    """verl's _balance_batch pads with rows of no model token (uid pad...): the real rows' advantages are those without them."""
    rng = np.random.default_rng(5)
    rows = multi_turn_rows(rng, uids=("r_1", "r_2", "r_3"), sessions=3, outputs=outputs)
    batch = store(rows, pad=3)
    got, _ = compute(trainer_for(f"algorithm.adv_estimator={name}", *options), batch)
    sessions: dict[str, dict[str, float]] = defaultdict(dict)
    for row in rows:
        sessions[row["uid"]][row["key"].rsplit("_", 1)[0]] = row["reward"]
    per_uid = plain_role_level(name, {u: list(s.values()) for u, s in sessions.items()})
    value_of = {session: a for u, s in sessions.items() for session, a in zip(s, per_uid[u], strict=True)}
    want = {row["key"]: {p: value_of[row["key"].rsplit("_", 1)[0]] for p, m in enumerate(row["mask"]) if m} for row in rows}
    assert_matches(got, batch, rows, want)


@pytest.mark.parametrize("name", ["grpo", "rllm_rloo"])
def test_advantage_transforms_run_on_v1_after_verls_own_grpo_and_an_rllm_name_with_metrics_in_the_step(transfer_queue, name):
    rng = np.random.default_rng(5)
    rows = multi_turn_rows(rng, uids=("q_1", "q_2"), sessions=3, outputs=(1, 2))
    batch = store(rows)
    plain, plain_metrics = compute(trainer_for(f"algorithm.adv_estimator={name}"), batch)
    transforms = "+algorithm.rllm_advantage_transforms=[{name:clip,min:-0.4},{name:scale,positive:3.0}]"
    got, metrics = compute(trainer_for(f"algorithm.adv_estimator={name}", transforms), batch)
    for before, after in zip(plain, got, strict=True):
        a = before.double().numpy()
        want = np.maximum(a, -0.4)
        want = np.where(want > 0, want * 3.0, want)
        assert after.double().numpy() == pytest.approx(want, abs=1e-6)
    assert not any(key.startswith("rllm/transform/") for key in plain_metrics)
    clipped = np.maximum(np.concatenate([t.numpy() for t in plain]), -0.4)
    assert metrics["rllm/transform/all_groups/scale/max"] == pytest.approx(3.0 * clipped.max(), abs=1e-6)
