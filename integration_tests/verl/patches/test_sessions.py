"""verl's v1 path ``compute_advantage_for_multi_trajectories`` with ``rllm_*`` names: one trajectory per session.

Keys are ``{uid}_{session}_{index}``; with the session extension every ``rllm_*`` estimator
compares the sessions of a uid (reward = final output's reward) and writes the session's
advantage to all its outputs. verl's own names keep verl's behaviour.
"""

from __future__ import annotations

import copy
import itertools
import logging

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
pytest.importorskip("transfer_queue", reason="verl's v1 trainer needs TransferQueue")
import verl.trainer.ppo.v1.trainer_base as trainer_base
import verl.trainer.ppo.v1.utils as v1_utils
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

EPS = 1e-6
SESSIONS_WHERE = "advantage estimator 'rllm_rloo' in compute_advantage_for_multi_trajectories"


def run(data, keys, name, config):
    return compute_advantage_for_multi_trajectories(data, keys, adv_estimator=name, config=config)


def verl_without_us(data, keys, name, config):
    return compute_advantage_for_multi_trajectories.__wrapped__(data, keys, adv_estimator=name, config=config)


def test_the_extension_is_active_where_verl_calls_it():
    assert compute_advantage_for_multi_trajectories.rllm_extension == "sessions"
    assert trainer_base.compute_advantage_for_multi_trajectories is v1_utils.compute_advantage_for_multi_trajectories
    assert compute_advantage_for_multi_trajectories.__wrapped__.__code__.co_filename == v1_utils.__file__


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("name", ["rllm_grpo", "rllm_rloo", "rllm_reinforce_plus_plus_baseline", "rllm_median_baseline"])
def test_every_rllm_estimator_gives_each_session_one_advantage(ref, algorithm_config, name, seed):
    data, keys = ref.make_session_batch(np.random.default_rng(seed))
    assert len(set(k.rsplit("_", 1)[0] for k in keys)) < len(keys), "the batch must have a session with several outputs"
    expected = ref.sessions(keys, data.non_tensor_batch["uid"], data.batch["token_level_rewards"], data.batch["response_mask"], ref.session_estimators[name])
    out = run(data, keys, name, algorithm_config(adv_estimator=name))
    np.testing.assert_allclose(out.batch["advantages"].numpy(), expected, atol=1e-6)
    assert out.batch["returns"] is out.batch["advantages"]


def test_session_lengths_are_the_tokens_of_all_its_outputs(ref, algorithm_config):
    """rllm_opo's length weights: a session's length is the response tokens over all its outputs."""

    def opo(groups, lengths):
        return [r - (r * n).sum() / n.sum() if r.size > 1 else r for r, n in zip(groups, lengths, strict=True)]

    data, keys = ref.make_session_batch(np.random.default_rng(11))
    expected = ref.sessions(keys, data.non_tensor_batch["uid"], data.batch["token_level_rewards"], data.batch["response_mask"], opo, with_lengths=True)
    out = run(data, keys, "rllm_opo", algorithm_config(adv_estimator="rllm_opo"))
    np.testing.assert_allclose(out.batch["advantages"].numpy(), expected, atol=1e-6)


def test_worked_example_two_sessions_of_three_and_one_outputs(ref, algorithm_config):
    """Session 0 of prompt p has outputs 0, 1, 2 (scores 0.2, 0.5, 1.0), session 1 one output (score 0.0)."""
    keys = ["p_0_0", "p_0_1", "p_0_2", "p_1_0"]
    data = ref.make_batch([0.2, 0.5, 1.0, 0.0], [3, 4, 2, 5], ["p"] * 4)
    grpo = run(copy.deepcopy(data), keys, "rllm_grpo", algorithm_config())
    # sessions' rewards [1.0, 0.0]: (1 - 0.5) / (0.5 + 1e-6) on every output of session 0, the opposite on session 1
    np.testing.assert_allclose(grpo.batch["advantages"].max(dim=1).values.numpy()[:3], [0.999998] * 3, atol=1e-6)
    np.testing.assert_allclose(grpo.batch["advantages"][3].numpy(), [-0.999998] * 5 + [0.0] * 2, atol=1e-6)
    rloo = run(copy.deepcopy(data), keys, "rllm_rloo", algorithm_config(adv_estimator="rllm_rloo"))
    np.testing.assert_allclose(ref.broadcast(np.array([1.0, 1.0, 1.0, -1.0]), data.batch["response_mask"]), rloo.batch["advantages"].numpy(), atol=1e-6)


@pytest.fixture
def batched_user_estimator():
    """Register ``h_sessions_<id>``: its batched form returns ``produce(r - group mean)``; unregister after."""
    from rllm_verl import register_estimators_into_verl

    from rllm_plugins import register_rllm_adv_estimator, unregister_rllm_adv_estimator

    names = []

    def make(name, produce):
        def batched(values, offsets, **_):
            centred = values.copy()
            for start, stop in itertools.pairwise(offsets):
                centred[start:stop] -= values[start:stop].mean()
            return produce(centred)

        def listed(rewards, **_):
            advantages = [r - r.mean() for r in rewards]
            return advantages, advantages

        register_rllm_adv_estimator(name, batched=batched)(listed)
        register_estimators_into_verl()
        names.append(name)
        return f"rllm_{name}"

    yield make
    for name in names:
        unregister_rllm_adv_estimator(name)


@pytest.mark.parametrize(
    "produce",
    [lambda a: torch.tensor(a, requires_grad=True), lambda a: torch.tensor(a, dtype=torch.bfloat16), lambda a: a.reshape(-1, 1), list],
    ids=["requires-grad", "bf16", "column", "list"],
)
def test_a_batched_estimators_output_on_sessions_follows_the_one_rule(ref, algorithm_config, batched_user_estimator, produce):
    name = batched_user_estimator("h_sessions_rule", produce)
    data = ref.make_batch([0.2, 0.5, 1.0, 0.0], [2] * 4, ["p"] * 4)
    out = run(data, ["p_0_0", "p_0_1", "p_0_2", "p_1_0"], name, algorithm_config(adv_estimator=name))
    np.testing.assert_allclose(out.batch["advantages"][:, 0].numpy(), [0.5, 0.5, 0.5, -0.5])  # sessions' rewards [1.0, 0.0]


def test_a_batched_estimators_output_outside_the_rule_names_it_on_sessions(ref, algorithm_config, batched_user_estimator):
    name = batched_user_estimator("h_sessions_bad", lambda a: {"a": 1.0})
    data = ref.make_batch([0.2, 0.5, 1.0, 0.0], [2] * 4, ["p"] * 4)
    with pytest.raises(ValueError, match=r"'rllm_h_sessions_bad' \(sessions of .*\): the estimator \(.*\) returned dict \{'a': 1.0\}; advantages must be"):
        run(data, ["p_0_0", "p_0_1", "p_0_2", "p_1_0"], name, algorithm_config(adv_estimator=name))


@pytest.mark.parametrize("index", [0, 2])
def test_one_output_per_session_is_exactly_the_row_path(ref, algorithm_config, index):
    rewards, uids = [1.0, 0.0, 0.0, 3.0, 1.0], ["a", "a", "a", "b", "b"]
    keys = [f"{u}_{i}_{index}" for i, u in enumerate(uids)]
    for name in ("rllm_grpo", "rllm_rloo", "rllm_median_baseline"):
        ours = run(ref.make_batch(rewards, [3, 5, 1, 7, 2], uids), keys, name, algorithm_config(adv_estimator=name))
        rows = compute_advantage(ref.make_batch(rewards, [3, 5, 1, 7, 2], uids), adv_estimator=name, config=algorithm_config(adv_estimator=name))
        assert torch.equal(ours.batch["advantages"], rows.batch["advantages"])


@pytest.mark.parametrize("name", ["grpo", "rloo", "reinforce_plus_plus_baseline", "grpo_vectorized"])
def test_verl_names_give_verl_own_numbers(ref, algorithm_config, name):
    data, keys = ref.make_session_batch(np.random.default_rng(3))
    ours = run(copy.deepcopy(data), keys, name, algorithm_config(adv_estimator=name))
    theirs = verl_without_us(copy.deepcopy(data), keys, name, algorithm_config(adv_estimator=name))
    assert torch.equal(ours.batch["advantages"], theirs.batch["advantages"])


def test_verl_grpo_keeps_its_sample_std_session_semantics(ref, algorithm_config):
    def verl_grpo(groups):
        return [(r - r.mean()) / (r.std(ddof=1) + EPS) if r.size > 1 else r / (1 + EPS) for r in groups]

    data, keys = ref.make_session_batch(np.random.default_rng(4))
    expected = ref.sessions(keys, data.non_tensor_batch["uid"], data.batch["token_level_rewards"], data.batch["response_mask"], verl_grpo)
    np.testing.assert_allclose(run(data, keys, "grpo", algorithm_config(adv_estimator="grpo")).batch["advantages"].numpy(), expected, atol=1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_rllm_grpo_equals_verl_grpo_after_the_ddof_rescaling(ref, algorithm_config, seed):
    data, keys = ref.make_session_batch(np.random.default_rng(seed))
    ours = run(copy.deepcopy(data), keys, "rllm_grpo", algorithm_config()).batch["advantages"].numpy()
    theirs = run(copy.deepcopy(data), keys, "grpo", algorithm_config(adv_estimator="grpo")).batch["advantages"].numpy()

    def scale(groups):  # (s1 + eps) / (s0 + eps) per group of n sessions; 1 for n = 1
        return [np.full(r.size, (r.std(ddof=1) + EPS) / (r.std() + EPS) if r.size > 1 else 1.0) for r in groups]

    factor = ref.sessions(keys, data.non_tensor_batch["uid"], data.batch["token_level_rewards"], torch.ones_like(data.batch["response_mask"]), scale)
    np.testing.assert_allclose(ours, theirs * factor, atol=1e-5)


def test_legacy_compute_advantage_stays_one_row_one_trajectory(ref, algorithm_config):
    """verl's RayPPOTrainer calls ray_trainer.compute_advantage, which the session extension leaves alone."""
    import verl.trainer.ppo.ray_trainer as ray_trainer

    assert getattr(ray_trainer.compute_advantage, "rllm_extension", None) in (None, "reward_keys")  # only the reward-key extension wraps it
    data, _ = ref.make_session_batch(np.random.default_rng(5))
    row_rewards = data.batch["token_level_rewards"].to(torch.float64).sum(-1).numpy()
    expected = ref.broadcast(ref.per_group(row_rewards, list(data.non_tensor_batch["uid"]), ref.grpo), data.batch["response_mask"])
    out = compute_advantage(data, adv_estimator="rllm_grpo", config=algorithm_config())
    np.testing.assert_allclose(out.batch["advantages"].numpy(), expected, atol=1e-5)


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (["a_0_0", "a_0_1", "a_1"], r"row 2: batch key 'a_1' is not of the form \{uid\}_\{session_id\}_\{index\}"),
        (["a_0_0", "a_0_x", "a_1_0"], r"row 1: batch key 'a_0_x' ends in 'x', not an integer output index"),
        (["a_0_1", "a_0_1", "a_1_0"], r"row 1: batch key 'a_0_1' appears twice \(also row 0\)"),
        (["a_0_0", "a_0_1"], r"2 batch keys for 3 rows"),
        # every key ends in _0 (the fast path; before: not parsed, the rows counted as extra group members)
        (["a_0_0", "a_1_0", "a_0_0"], rf"^{SESSIONS_WHERE}: row 2: batch key 'a_0_0' appears twice \(also row 0\)"),
        (["a_0_0", "garbage_0", "a_1_0"], rf"^{SESSIONS_WHERE}: row 1: batch key 'garbage_0' is not of the form"),
    ],
)
def test_bad_keys_raise_naming_the_row(ref, algorithm_config, keys, message):
    data = ref.make_batch([1.0, 0.0, 0.5], [2, 2, 2], ["a", "a", "a"])
    with pytest.raises(ValueError, match=message):
        run(data, keys, "rllm_rloo", algorithm_config(adv_estimator="rllm_rloo"))


def test_a_session_across_two_uids_raises(ref, algorithm_config):
    data = ref.make_batch([1.0, 0.0, 0.5], [2, 2, 2], ["a", "b", "a"])
    with pytest.raises(ValueError, match=r"row 1: session 'a_0' has rows of uid 'a' \(row 0\) and 'b'; a session belongs to one prompt"):
        run(data, ["a_0_0", "a_0_1", "a_1_0"], "rllm_rloo", algorithm_config(adv_estimator="rllm_rloo"))


def test_a_non_finite_final_reward_raises_naming_the_row(ref, algorithm_config):
    data = ref.make_batch([1.0, float("nan"), 0.5], [2, 2, 2], ["a", "a", "a"])
    with pytest.raises(ValueError, match=r"row 1 \(uid 'a'\) has reward nan; token_level_rewards must be finite"):
        run(data, ["a_0_0", "a_0_1", "a_1_0"], "rllm_rloo", algorithm_config(adv_estimator="rllm_rloo"))


def test_bf16_rewards_come_back_in_bf16(ref, algorithm_config):
    data, keys = ref.make_session_batch(np.random.default_rng(6))
    data.batch["token_level_rewards"] = data.batch["token_level_rewards"].to(torch.bfloat16)
    rloo = ref.session_estimators["rllm_rloo"]
    expected = ref.sessions(keys, data.non_tensor_batch["uid"], data.batch["token_level_rewards"], data.batch["response_mask"], rloo)
    out = run(data, keys, "rllm_rloo", algorithm_config(adv_estimator="rllm_rloo")).batch["advantages"]
    assert out.dtype == torch.bfloat16
    np.testing.assert_allclose(out.float().numpy(), expected, rtol=1e-2, atol=1e-2)


def test_a_changed_signature_leaves_verl_untouched_with_one_warning(caplog):
    from rllm_verl.extension import extension_status, install
    from rllm_verl.patches.sessions import SESSIONS

    ours = v1_utils.compute_advantage_for_multi_trajectories

    def changed(data, batch_keys, adv_estimator, gamma=1.0, lam=1.0, num_repeat=1, norm_adv_by_std_in_grpo=True, config=None, weights=None):
        return None

    v1_utils.compute_advantage_for_multi_trajectories = trainer_base.compute_advantage_for_multi_trajectories = changed
    try:
        with caplog.at_level(logging.WARNING, logger="rllm_verl.extension"):
            install(SESSIONS)
            install(SESSIONS)
        assert v1_utils.compute_advantage_for_multi_trajectories is changed
        assert trainer_base.compute_advantage_for_multi_trajectories is changed
        assert extension_status()["sessions"].startswith("not applied: its signature is (data, batch_keys")
        warnings = [r.getMessage() for r in caplog.records if r.name == "rllm_verl.extension"]
        assert len(warnings) == 1
        assert "weights=None" in warnings[0] and "verl's own function is used" in warnings[0]
    finally:
        v1_utils.compute_advantage_for_multi_trajectories = trainer_base.compute_advantage_for_multi_trajectories = ours
        install(SESSIONS)
    assert extension_status()["sessions"] == "active"
    assert v1_utils.compute_advantage_for_multi_trajectories is ours


FRESH_PROCESS = """
import json, sys
import verl
from rllm_verl.extension import extension_status

loaded = [m for m in ("verl.trainer.ppo.v1.utils", "verl.trainer.ppo.v1.trainer_base", "verl.trainer.ppo.ray_trainer") if m in sys.modules]
before = extension_status().get("sessions")
import numpy as np, torch
import verl.trainer.ppo.v1.trainer_base as trainer_base
from verl import DataProto

rewards = torch.zeros(4, 3)
rewards[:, -1] = torch.tensor([0.2, 0.5, 1.0, 0.0])
data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": torch.ones(4, 3)}, non_tensors={"uid": np.array(["p"] * 4, dtype=object)})
out = trainer_base.compute_advantage_for_multi_trajectories(data, ["p_0_0", "p_0_1", "p_0_2", "p_1_0"], adv_estimator="rllm_rloo")
fn = trainer_base.compute_advantage_for_multi_trajectories
print(json.dumps({"loaded_by_import_verl": loaded, "before": before, "after": extension_status().get("sessions"),
                  "extension": getattr(fn, "rllm_extension", None), "advantages": out.batch["advantages"][:, 0].tolist()}))
"""


def fresh_process(**env: str) -> dict:
    import json
    import os
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", FRESH_PROCESS], env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_import_verl_leaves_the_v1_stack_unimported_and_the_extension_applies_when_it_is():
    report = fresh_process()
    assert report["loaded_by_import_verl"] == []
    assert report["before"] == "pending (applied when verl.trainer.ppo.v1.utils is imported)"
    assert report["after"] == "active" and report["extension"] == "sessions"
    np.testing.assert_allclose(report["advantages"], [1.0, 1.0, 1.0, -1.0])  # sessions' rewards [1.0, 0.0]


def test_the_opt_out_restores_verl_behaviour():
    report = fresh_process(RLLM_PLUGINS_VERL_SESSIONS="0")
    assert report["before"] == report["after"] == "off (RLLM_PLUGINS_VERL_SESSIONS=0)"
    assert report["extension"] is None
    rows = np.array([0.2, 0.5, 1.0, 0.0])  # verl's own behaviour: every output row is a member of p's group
    np.testing.assert_allclose(report["advantages"], [r - np.delete(rows, i).mean() for i, r in enumerate(rows)], atol=1e-6)


def test_estimator_options_are_checked_on_the_session_path_as_on_the_row_path(ref, algorithm_config):
    """A typo in rllm_estimator_kwargs is an error whether or not the batch has a session with several outputs."""
    data = ref.make_batch([1.0, 0.0, 1.0, 0.5], [2, 2, 2, 2], ["a"] * 4)
    config = algorithm_config(adv_estimator="rllm_passk_training", rllm_estimator_kwargs={"kk": 2})
    unknown = (
        r"algorithm\.rllm_estimator_kwargs: unknown option 'kk' for estimator 'passk_training' \(rllm-plugins \(built-in\)\), "
        r"which accepts: epsilon, k\. Did you mean 'k'\?"
    )
    with pytest.raises(ValueError, match=r"^advantage estimator 'rllm_passk_training': " + unknown):
        run(copy.deepcopy(data), ["a_0_0", "a_1_0", "a_2_0", "a_3_0"], "rllm_passk_training", config)
    with pytest.raises(ValueError, match=r"^advantage estimator 'rllm_passk_training' \(sessions of compute_advantage_for_multi_trajectories\): " + unknown):
        run(copy.deepcopy(data), ["a_0_0", "a_0_1", "a_1_0", "a_2_0"], "rllm_passk_training", config)


def test_reward_keys_score_each_session_by_its_final_output(ref, algorithm_config):
    """gdpo_reward_keys on the session path: sessions a_0 (final row 1), a_1, a_2 score acc [0, 1, 0] and fmt [1, 1, 0].

    normalize_then_sum with grpo: acc -> [-1/sqrt2, sqrt2, -1/sqrt2], fmt -> [1/sqrt2, 1/sqrt2, -sqrt2] (population
    std sqrt(2)/3, eps 1e-6), sum [0, 3/sqrt2, -3/sqrt2], whitened with the sample std 3/sqrt2: [0, 1, -1] per session.
    """
    data = ref.make_batch([1.0, 0.0, 1.0, 0.5], [2, 2, 2, 2], ["a"] * 4)
    data.non_tensor_batch["acc"] = np.array([1.0, 0.0, 1.0, 0.0], dtype=object)  # row 0 is not final: its scores do not count
    data.non_tensor_batch["fmt"] = np.array([0.0, 1.0, 1.0, 0.0], dtype=object)
    keys = ["a_0_0", "a_0_1", "a_1_0", "a_2_0"]
    out = run(copy.deepcopy(data), keys, "rllm_grpo", algorithm_config(gdpo_reward_keys=["acc", "fmt"]))
    np.testing.assert_allclose(out.batch["advantages"][:, 0].numpy(), [0.0, 0.0, 1.0, -1.0], atol=1e-5)
    summed_config = algorithm_config(adv_estimator="rllm_rloo", gdpo_reward_keys=["acc", "fmt"], rllm_multi_objective_aggregation="sum_then_normalize")
    summed = run(copy.deepcopy(data), keys, "rllm_rloo", summed_config)
    np.testing.assert_allclose(summed.batch["advantages"][:, 0].numpy(), [0.0, 0.0, 1.5, -1.5], atol=1e-6)  # rloo of the sums [1, 2, 0]
    del data.non_tensor_batch["acc"], data.non_tensor_batch["fmt"]  # verl's v1 trainer: only uid reaches the advantage step
    with pytest.raises(ValueError, match=r"reward key 'acc' of algorithm\.gdpo_reward_keys is not in the batch \(non_tensor_batch has \['uid'\]\)"):
        run(data, keys, "rllm_grpo", algorithm_config(gdpo_reward_keys=["acc", "fmt"]))


def test_the_session_path_applies_the_output_rule(ref, algorithm_config):
    """What an estimator returns is read by the one output rule: text is refused, a tensor that requires grad is read."""
    from rllm_verl.registration import register_estimators_into_verl

    from rllm_plugins.registry import register_rllm_adv_estimator, unregister_rllm_adv_estimator

    def text(values, offsets, **_):
        return "0.5"

    def tensor(values, offsets, **_):
        return torch.tensor(values - values.mean(), requires_grad=True)

    data = ref.make_batch([1.0, 0.0, 3.0], [2, 2, 2], ["a"] * 3)
    keys = ["a_0_0", "a_0_1", "a_1_0"]  # sessions' rewards [0, 3]
    try:
        for name, fn in (("session_text", text), ("session_tensor", tensor)):
            register_rllm_adv_estimator(name, batched=fn)(lambda rewards, **_: (rewards, rewards))
        register_estimators_into_verl()
        with pytest.raises(ValueError, match=r"the estimator \(user code .*\) returned str '0\.5'; advantages must be a sequence, numpy array or torch tensor"):
            run(copy.deepcopy(data), keys, "rllm_session_text", algorithm_config(adv_estimator="rllm_session_text"))
        out = run(copy.deepcopy(data), keys, "rllm_session_tensor", algorithm_config(adv_estimator="rllm_session_tensor"))
        np.testing.assert_allclose(out.batch["advantages"][:, 0].numpy(), [-1.5, -1.5, 1.5])
    finally:
        for name in ("session_text", "session_tensor"):
            unregister_rllm_adv_estimator(name)


def test_an_unhashable_or_two_dimensional_uid_raises_naming_it_on_the_session_path(ref, algorithm_config):
    """As on the row path; before, a bare TypeError (unhashable type: 'list') or numpy's ambiguous truth value."""
    keys = ["a_0_0", "a_0_1", "a_1_0"]
    data = ref.make_batch([1.0, 0.0, 1.0], [2, 2, 2], ["a"] * 3)
    uids = np.empty(3, dtype=object)
    uids[:] = [["a"], ["a"], ["a"]]
    data.non_tensor_batch["uid"] = uids
    with pytest.raises(ValueError, match=r"row 0 has uid \['a'\], a list; a uid must be hashable \(a str or an int\)"):
        run(copy.deepcopy(data), keys, "rllm_rloo", algorithm_config(adv_estimator="rllm_rloo"))
    data.non_tensor_batch["uid"] = np.array([["a", "x"], ["a", "x"], ["a", "y"]], dtype=object)
    with pytest.raises(ValueError, match=r"uid has shape \(3, 2\); it needs one id per row \(1-D\)"):
        run(data, keys, "rllm_rloo", algorithm_config(adv_estimator="rllm_rloo"))


def test_a_session_advantage_that_overflows_fp16_rewards_is_an_error(ref, algorithm_config):
    data = ref.make_batch([0.0, 60000.0, -60000.0], [2, 2, 2], ["a"] * 3)
    data.batch["token_level_rewards"] = data.batch["token_level_rewards"].half()
    with pytest.raises(
        ValueError, match=r"\(sessions of compute_advantage_for_multi_trajectories\): advantage 120000\.0 of row 0 \(uid 'a'\) overflows torch\.float16"
    ):
        run(data, ["a_0_0", "a_0_1", "a_1_0"], "rllm_rloo", algorithm_config(adv_estimator="rllm_rloo"))


def test_a_session_advantage_past_float32s_range_is_an_error(ref, algorithm_config):
    data = ref.make_batch([0.0, 3e38, -3e38], [2, 2, 2], ["a"] * 3)
    with pytest.raises(
        ValueError,
        match=r"\(sessions of compute_advantage_for_multi_trajectories\): advantage 6\.0\d*e\+38 of row 0 \(uid 'a'\) overflows torch\.float32 "
        r"\(largest 3\.40282e\+38\), the dtype of token_level_rewards; compute rewards in float64",
    ):
        run(data, ["a_0_0", "a_0_1", "a_1_0"], "rllm_rloo", algorithm_config(adv_estimator="rllm_rloo"))


def test_a_final_output_with_an_all_zero_mask_gives_verls_grpo_zeros_and_ours_the_session_advantage(ref, algorithm_config):
    """Session 0: outputs 0 (score 0.2) and 1 (final, score 1.0, no response token); session 1: one output (0.0)."""
    keys = ["p_0_0", "p_0_1", "p_1_0"]
    data = ref.make_batch([0.2, 1.0, 0.0], [2, 0, 2], ["p"] * 3)
    theirs = verl_without_us(copy.deepcopy(data), keys, "grpo", algorithm_config(adv_estimator="grpo"))
    ours = run(copy.deepcopy(data), keys, "rllm_grpo", algorithm_config(adv_estimator="rllm_grpo"))
    sessions = np.array([1.0, 0.0])
    grpo = (sessions - sessions.mean()) / (sessions.std() + EPS)  # rLLM's GRPO over the two sessions' final rewards
    assert theirs.batch["advantages"][0].abs().sum() == 0  # verl read session 0's advantage at a masked position
    np.testing.assert_allclose(ours.batch["advantages"][:, 0].numpy(), [grpo[0], 0.0, grpo[1]], rtol=1e-6)


def test_a_running_baseline_on_sessions_keeps_1_and_the_string_1_apart(ref, algorithm_config):
    """The scan order of a stateful estimator groups by the one uid rule: prompt 1 and prompt "1" are two groups."""
    from rllm_verl.compute.state import scratch_state

    options = {"terms": [["grpo", 1.0], ["rae", 0.5]]}
    rewards = [0.0, 1.0, 0.0, 1.0, 1.0]

    def first_token(keys, uids):
        with scratch_state():
            config = algorithm_config(adv_estimator="rllm_composite", rllm_estimator_kwargs=options)
            out = run(ref.make_batch(rewards, [2] * 5, uids), keys, "rllm_composite", config)
            return out.batch["advantages"][:, 0].numpy()

    mixed = first_token(["1_0_0", "1_0_1", "1_1_0", "1_2_0", "1_3_0"], [1, 1, 1, "1", "1"])
    apart = first_token(["1_0_0", "1_0_1", "1_1_0", "x_2_0", "x_3_0"], [1, 1, 1, "x", "x"])
    np.testing.assert_allclose(mixed, apart, atol=1e-6)
