"""The units ``+algorithm.rllm_advantage_transforms`` see on verl: the estimator's units, whatever the path.

A probe transform records what it receives (units, offsets, rewards, lengths); each case compares it with a plain
re-statement written here: padding rows are no unit (legacy and v1), a multi-output session is one unit (its final
output's reward, the model tokens of all its outputs), for ``rllm_*`` estimators and after verl's own ``grpo``, and the
numbers equal the core collector's on the same trajectories.
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

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.transforms import register_advantage_transform, unregister_advantage_transform

WIDTH = 6


def batch(rewards, lengths, uids):
    n = len(rewards)
    mask = torch.zeros(n, WIDTH, dtype=torch.int64)
    token_rewards = torch.zeros(n, WIDTH)
    for row, (r, k) in enumerate(zip(rewards, lengths, strict=True)):
        mask[row, :k] = 1
        token_rewards[row, max(k - 1, 0)] = r
    return DataProto.from_dict(tensors={"token_level_rewards": token_rewards, "response_mask": mask}, non_tensors={"uid": np.array(uids, dtype=object)})


def algorithm(transforms, seen=None):
    """verl's ``algorithm`` section with ``transforms``, resolved as at config time (the check's trial run cleared from ``seen``)."""
    from rllm_verl.compute.transforms import transforms_of

    config = OmegaConf.create({"gamma": 1.0, "lam": 1.0, "norm_adv_by_std_in_grpo": True, "rllm_advantage_transforms": transforms})
    transforms_of(config)
    if seen is not None:
        seen.clear()
    return config


@pytest.fixture
def probe():
    """A third-party transform that whitens over the batch's units and records what it received."""
    seen: list[dict] = []

    @register_advantage_transform("test_unit_probe")
    def whiten(advantages, *, offsets, rewards, lengths):
        seen.append({"advantages": advantages.tolist(), "offsets": offsets.tolist(), "rewards": rewards.tolist(), "lengths": lengths.tolist()})
        return (advantages - advantages.mean()) / advantages.std()

    try:
        yield seen
    finally:
        unregister_advantage_transform("test_unit_probe")


@register_advantage_transform("test_longer_is_worse")
def longer_is_worse(advantages, *, lengths, rate: float = 0.01):
    return advantages - rate * lengths


def whitened(values):
    values = np.asarray(values, dtype=np.float64)
    return (values - values.mean()) / values.std()


def grpo_by_hand(rewards, uids, *, unbiased):
    """GRPO per uid in a loop: verl's (unbiased std, eps 1e-6, a group of one 0) or rLLM's (population std, eps 1e-6)."""
    rows = defaultdict(list)
    for i, u in enumerate(uids):
        rows[u].append(i)
    out = [0.0] * len(rewards)
    for members in rows.values():
        values = [rewards[i] for i in members]
        mean = sum(values) / len(values)
        if len(values) == 1:
            std = 1.0 if unbiased else 0.0
        else:
            std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1 if unbiased else len(values)))
        for i in members:
            out[i] = 0.0 if unbiased and len(values) == 1 else (rewards[i] - mean) / (std + 1e-6)
    return out


REAL = ([1.0, 0.0, 0.5, 2.0, 0.0, 1.0], [3, 2, 4, 1, 5, 2], ["a", "a", "b", "b", "c", "c"])


@pytest.mark.parametrize("name, unbiased", [("grpo", True), ("rllm_grpo", False)])
def test_padding_rows_are_no_unit_of_a_batch_whitening_transform(probe, name, unbiased):
    rewards, lengths, uids = REAL
    padded = batch([*rewards, 0.0, 0.0], [*lengths, 0, 0], [*uids, "pad_0", "pad_1"])  # verl v1's _balance_batch padding
    out = ray_trainer.compute_advantage(padded, name, config=algorithm(["test_unit_probe"], probe))
    estimator = grpo_by_hand(rewards, uids, unbiased=unbiased)
    assert probe[-1]["offsets"] == [0, 2, 4, 6] and probe[-1]["lengths"] == [float(k) for k in lengths]
    np.testing.assert_allclose(probe[-1]["advantages"], estimator, atol=1e-6)
    got = out.batch["advantages"].numpy()
    np.testing.assert_allclose(got[:6, 0], whitened(estimator), atol=1e-5)
    assert not got[6:].any()
    metrics = out.meta_info["rllm_transform_metrics"]
    assert metrics["rllm/transform/all_groups/test_unit_probe/mean"] == pytest.approx(0.0, abs=1e-9)  # over the 6 real rows only
    assert metrics["rllm/transform/all_groups/test_unit_probe/std"] == pytest.approx(1.0, abs=1e-9)


def test_the_issues_case_two_padding_rows_leave_plus_minus_one():
    """Two groups of two with rewards 1/0: whitened advantages are exactly +-1, padding rows added or not."""
    seen = []

    @register_advantage_transform("test_batch_whiten")
    def batch_whiten(advantages):
        seen.append(advantages.size)
        return (advantages - advantages.mean()) / advantages.std()

    try:
        for name in ("rllm_grpo", "grpo"):
            padded = batch([1.0, 0.0, 1.0, 0.0, 0.0, 0.0], [2, 2, 2, 2, 0, 0], ["a", "a", "b", "b", "pad_0", "pad_1"])
            out = ray_trainer.compute_advantage(padded, name, config=algorithm(["test_batch_whiten"], seen))
            np.testing.assert_allclose(out.batch["advantages"].numpy()[:4, 0], [1.0, -1.0, 1.0, -1.0], atol=1e-6)
            assert seen == [4], f"{name}: one call over the 4 real rows"
    finally:
        unregister_advantage_transform("test_batch_whiten")


def sessions_by_hand(keys, uids, rewards, lengths):
    """Each session's final output's reward and the model tokens of all its outputs, sessions grouped by uid in order of first appearance."""
    final, total, uid_of = {}, defaultdict(int), {}
    for row, key in enumerate(keys):
        session, index = key.rsplit("_", 1)
        if session not in final or int(index) > final[session][0]:
            final[session] = (int(index), row)
        total[session] += lengths[row]
        uid_of[session] = uids[row]
    by_uid = defaultdict(list)
    for session in final:
        by_uid[uid_of[session]].append(session)
    ordered = [s for members in by_uid.values() for s in members]
    offsets = np.cumsum([0] + [len(m) for m in by_uid.values()]).tolist()
    return ordered, offsets, [rewards[final[s][1]] for s in ordered], [float(total[s]) for s in ordered], [uid_of[s] for s in ordered]


SESSION_KEYS = ["p_0_0", "p_0_1", "p_1_0", "q_0_0", "q_1_0", "q_1_3", "q_2_0"]
SESSION_UIDS = ["p", "p", "p", "q", "q", "q", "q"]
SESSION_REWARDS = [0.0, 1.0, 0.5, 0.25, 0.0, 2.0, 1.0]
SESSION_LENGTHS = [2, 3, 4, 1, 2, 5, 3]


@pytest.mark.parametrize("name, unbiased", [("grpo", True), ("rllm_grpo", False)])
def test_a_multi_output_session_is_one_unit_after_rllm_and_verls_own_grpo(probe, name, unbiased):
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    data = batch(SESSION_REWARDS, SESSION_LENGTHS, SESSION_UIDS)
    out = compute_advantage_for_multi_trajectories(data, SESSION_KEYS, adv_estimator=name, config=algorithm(["test_unit_probe"], probe))
    sessions, offsets, rewards, lengths, uids = sessions_by_hand(SESSION_KEYS, SESSION_UIDS, SESSION_REWARDS, SESSION_LENGTHS)
    assert len(probe) == 1, "the transforms ran once, over sessions"
    assert probe[0]["offsets"] == offsets and probe[0]["lengths"] == lengths
    np.testing.assert_allclose(probe[0]["rewards"], rewards, atol=1e-6)
    estimator = grpo_by_hand(rewards, uids, unbiased=unbiased)
    np.testing.assert_allclose(probe[0]["advantages"], estimator, atol=1e-6)
    per_session = dict(zip(sessions, whitened(estimator), strict=True))
    want = np.array([per_session[k.rsplit("_", 1)[0]] for k in SESSION_KEYS])
    np.testing.assert_allclose(out.batch["advantages"].numpy()[:, 0], want, atol=1e-5)


def test_the_docs_longer_is_worse_on_sessions_equals_the_collector():
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    data = batch(SESSION_REWARDS, SESSION_LENGTHS, SESSION_UIDS)
    config = algorithm([{"name": "test_longer_is_worse", "rate": 0.2}])
    out = compute_advantage_for_multi_trajectories(data, SESSION_KEYS, adv_estimator="rllm_reinforce", config=config)
    sessions, _, _, _, _ = sessions_by_hand(SESSION_KEYS, SESSION_UIDS, SESSION_REWARDS, SESSION_LENGTHS)
    groups: dict[str, list[Trajectory]] = {}
    trajectory_of = {}
    for session in sessions:  # one trajectory per session, one step per output in index order; its reward the final output's
        rows = sorted((int(k.rsplit("_", 1)[1]), r) for r, k in enumerate(SESSION_KEYS) if k.rsplit("_", 1)[0] == session)
        steps = [Step(response_ids=[7] * SESSION_LENGTHS[r]) for _, r in rows]
        trajectory_of[session] = Trajectory(steps=steps, reward=SESSION_REWARDS[rows[-1][1]])
        groups.setdefault(SESSION_UIDS[rows[-1][1]], []).append(trajectory_of[session])
    config = AlgorithmConfig(estimator="reinforce", advantage_transforms=[("test_longer_is_worse", {"rate": 0.2})])
    collect_reward_and_advantage_from_trajectory_groups([TrajectoryGroup(t, group_id=uid) for uid, t in groups.items()], config)
    want = [trajectory_of[k.rsplit("_", 1)[0]].steps[0].advantage for k in SESSION_KEYS]
    got = out.batch["advantages"].numpy()[:, 0]
    np.testing.assert_allclose(got, want, atol=1e-6)
    # by hand: the two-output session p_0 has reward 1.0 and 5 tokens: 1.0 - 0.2 * 5
    assert got[0] == pytest.approx(1.0 - 0.2 * 5, abs=1e-6) and got[1] == got[0]


def test_outputs_of_a_session_with_different_advantages_are_units_of_their_own(probe):
    """verl's own rloo on sessions treats each output as a sample (verl delegates to compute_advantage): so do the transforms."""
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    data = batch(SESSION_REWARDS, SESSION_LENGTHS, SESSION_UIDS)
    compute_advantage_for_multi_trajectories(data, SESSION_KEYS, adv_estimator="rloo", config=algorithm(["test_unit_probe"], probe))
    assert len(probe) == 1 and probe[0]["offsets"] == [0, 3, 7] and probe[0]["lengths"] == [float(k) for k in SESSION_LENGTHS]


# Cases a hostile review found; each compares with a plain re-statement or with another path on the same batch.


def with_log_probs(data, seed=0):
    gen = torch.Generator().manual_seed(seed)
    n = len(data)
    data.batch["old_log_probs"] = -torch.rand(n, WIDTH, generator=gen) * 2
    data.batch["ref_log_prob"] = -torch.rand(n, WIDTH, generator=gen) * 2
    return data


def test_kl_shaping_after_verls_grpo_on_v1_is_per_token_as_on_the_legacy_path():
    """v1's grpo copies one value per row from a sub-batch: the token-level transform must run after that copy, not inside."""
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    rewards, lengths, uids = REAL
    config = algorithm([{"name": "kl_shaping", "coef": 0.5}])
    legacy = ray_trainer.compute_advantage(with_log_probs(batch(rewards, lengths, uids)), "grpo", config=config)
    keys = [f"{u}_{i}_0" for i, u in enumerate(uids)]
    v1 = compute_advantage_for_multi_trajectories(with_log_probs(batch(rewards, lengths, uids)), keys, adv_estimator="grpo", config=config)
    np.testing.assert_allclose(v1.batch["advantages"].numpy(), legacy.batch["advantages"].numpy(), atol=1e-6)
    row0 = v1.batch["advantages"].numpy()[0, : lengths[0]]
    assert not np.allclose(row0, row0[0]), "kl_shaping makes the advantages differ token by token"


def test_verls_rloo_on_sessions_gives_the_transforms_its_rows_whatever_the_values(probe):
    """verl's rloo treats each output as a sample; equal values inside a session must not make the session one unit."""
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    keys, uids = ["p_0_0", "p_0_1", "p_1_0", "q_0_0", "q_1_0", "q_1_1"], ["p", "p", "p", "q", "q", "q"]
    config = algorithm(["test_unit_probe"], probe)
    compute_advantage_for_multi_trajectories(batch([1, 1, 0, 0, 1, 1], [2] * 6, uids), keys, adv_estimator="rloo", config=config)
    assert probe[-1]["offsets"] == [0, 3, 6], "one unit per row"


@pytest.mark.parametrize("name", ["grpo", "rllm_grpo"])
def test_a_row_without_model_tokens_in_a_real_group_is_no_unit_of_a_transform(probe, name):
    uids, lengths, rewards = ["a", "a", "b", "b", "c", "c"], [3, 2, 4, 1, 5, 0], [1.0, 0.0, 0.5, 2.0, 0.0, 3.0]
    out = ray_trainer.compute_advantage(batch(rewards, lengths, uids), name, config=algorithm(["test_unit_probe"], probe))
    assert probe[-1]["lengths"] == [3.0, 2.0, 4.0, 1.0, 5.0], "the five rows with a model token"
    got = out.batch["advantages"].numpy()[:5, 0]
    np.testing.assert_allclose(got, whitened(probe[-1]["advantages"]), atol=1e-5)
    np.testing.assert_allclose(got, [1.2247449, -0.8164966, -0.8164966, 1.2247449, -0.8164966], atol=1e-5)  # groups of two: either estimator


def test_a_nan_uid_on_sessions_is_named_by_its_batch_row():
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    keys, uids = ["p_0_0", "p_0_1", "p_1_0", "nan_0_0", "q_0_0", "q_1_0"], ["p", "p", "p", float("nan"), "q", "q"]
    for name in ("rllm_grpo", "rllm_rae"):
        with pytest.raises(ValueError, match=rf"'{name}' \(sessions of .*\): row 3 has uid nan"):
            compute_advantage_for_multi_trajectories(batch([1.0, 0.0, 0.5, 1.0, 0.0, 1.0], [2] * 6, uids), keys, adv_estimator=name, config=algorithm([]))


def test_a_token_part_the_batch_cannot_feed_is_refused_before_a_running_baseline_moves():
    from rllm_verl.compute.state import verl_estimator_state

    verl_estimator_state().clear()
    try:
        data = batch([1.0, 0.0, 0.5], [2, 3, 1], ["a", "a", "b"])  # no old_log_probs, no ref_log_prob
        needs = r"algorithm.rllm_advantage_transforms: advantage transform 'kl_shaping' .* needs data.batch\['old_log_probs', 'ref_log_prob'\]"
        with pytest.raises(ValueError, match=needs):
            ray_trainer.compute_advantage(data, "rllm_rae", config=algorithm(["kl_shaping"]))
        assert not verl_estimator_state(), "the state is as it was"
    finally:
        verl_estimator_state().clear()


def test_a_nan_reward_after_verls_grpo_is_named_as_the_cause_not_a_transform():
    with pytest.raises(ValueError, match=r"non-finite advantage in row 0 .* before any transform ran: row 1 has reward nan"):
        ray_trainer.compute_advantage(batch([1.0, float("nan"), 0.5, 0.0], [2] * 4, ["a", "a", "b", "b"]), "grpo", config=algorithm(["whiten"]))


def test_codapo_with_reward_keys_reads_the_summed_token_rewards_after_rllm_grpo_as_after_verls_grpo():
    """With algorithm.gdpo_reward_keys the estimator's rewards are per key; a transform's rewards are the rows' summed
    token_level_rewards on both paths (verl's own estimators give nothing else)."""
    uids = ["p", "p", "q", "q"]
    extra = {"acc": np.array([1.0, 0.0, 1.0, 1.0], dtype=object), "fmt": np.array([0.5, 0.1, 0.2, 0.9], dtype=object)}
    seen = {}

    @register_advantage_transform("test_rewards_seen")
    def rewards_seen(advantages, *, rewards):
        seen["rewards"] = rewards.tolist()
        return advantages

    try:
        for name in ("rllm_grpo", "grpo"):
            data = batch([1.0, 0.0, 1.0, 1.0], [2] * 4, uids)
            data.non_tensor_batch.update(extra)
            config = OmegaConf.create({"norm_adv_by_std_in_grpo": True, "gdpo_reward_keys": ["acc", "fmt"], "rllm_advantage_transforms": ["test_rewards_seen"]})
            ray_trainer.compute_advantage(data, name, config=config)
            assert seen.pop("rewards") == [1.0, 0.0, 1.0, 1.0], name
    finally:
        unregister_advantage_transform("test_rewards_seen")
