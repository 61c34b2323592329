"""``algorithm.gdpo_reward_keys`` with ``rllm_*`` estimators through verl's real ``compute_advantage``.

verl passes ``non_tensor_batch`` only to its ``gdpo``; rllm-plugins extends ``compute_advantage``
(guarded, opt-out) so the ``rllm_*`` estimators read the same per-key scores.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import types

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
from rllm_verl import context as reward_keys
from rllm_verl.extension import extension_status, install
from rllm_verl.patches.legacy import REWARD_KEYS, REWARD_KEYS_ENV
from rllm_verl.versions import ADVANTAGE_MODULES
from verl import DataProto
from verl.trainer.ppo import ray_trainer
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

PROMPT = 2
NAN = math.nan


def keyed_batch(scores: dict[str, list[float | None]], uids: list[str], lengths: list[int], width: int = 6) -> DataProto:
    """A DataProto as verl's legacy trainer has it before advantages: prompts, masks, and one column per reward key."""
    n = len(uids)
    response_mask = torch.zeros(n, width, dtype=torch.int64)
    for row, length in enumerate(lengths):
        response_mask[row, :length] = 1
    attention_mask = torch.cat([torch.ones(n, PROMPT, dtype=torch.int64), response_mask], dim=1)
    non_tensors = {"uid": np.array(uids, dtype=object), **{k: np.array(v, dtype=object) for k, v in scores.items()}}
    return DataProto.from_dict(
        tensors={
            "prompts": torch.zeros(n, PROMPT, dtype=torch.int64),
            "attention_mask": attention_mask,
            "response_mask": response_mask,
            "token_level_rewards": torch.full((n, width), 7.0),  # ignored when reward keys are set (as by verl's gdpo)
        },
        non_tensors=non_tensors,
    )


def rloo_by_hand(values: list[float]) -> list[float]:
    n = len(values)
    return list(values) if n == 1 else [v - (sum(values) - v) / (n - 1) for v in values]


def gdpo_by_hand(scores: dict[str, list[float | None]], uids: list[str], weights: list[float], estimator=rloo_by_hand) -> np.ndarray:
    """Per key and uid group the estimator on the present scores, weighted sum, whitening over scorable rows (sample std + 1e-6)."""
    n = len(uids)
    total = [0.0] * n
    for weight, column in zip(weights, scores.values(), strict=True):
        for uid in dict.fromkeys(uids):
            rows = [i for i in range(n) if uids[i] == uid and column[i] is not None]
            if rows:
                for i, a in zip(rows, estimator([float(column[i]) for i in rows]), strict=True):
                    total[i] += weight * a
    scorable = [i for i in range(n) if any(column[i] is not None for column in scores.values())]
    mean, std = statistics.fmean(total[i] for i in scorable), statistics.stdev(total[i] for i in scorable)
    out = np.zeros(n)
    for i in scorable:
        out[i] = (total[i] - mean) / (std + 1e-6)
    return out


def test_the_extension_is_active_where_verl_imported_the_trainer():
    assert extension_status()["reward_keys"] == "active"
    assert ray_trainer.compute_advantage.rllm_extension == "reward_keys"
    assert ray_trainer.compute_advantage.__wrapped__.__module__ in ADVANTAGE_MODULES  # ray_trainer, or trainer_utils (verl PR #7237)
    v1_utils = pytest.importorskip("verl.trainer.ppo.v1.utils")
    assert v1_utils.compute_advantage is ray_trainer.compute_advantage


def test_rllm_grpo_with_normalize_then_sum_equals_verls_gdpo_after_the_std_rescaling(algorithm_config):
    """Equal response lengths L (verl whitens over tokens, rLLM over trajectories) and equal group sizes (then the
    population-vs-sample std of GRPO is one constant factor that the whitening removes). What is left: verl's
    whitening variance has Bessel's correction over the T = L * B tokens, rLLM's over the B rows, so
    rllm = verl * sqrt((B - 1) / B * T / (T - 1))."""
    rng = np.random.default_rng(0)
    uids = [u for u in "abcdef" for _ in range(4)]
    scores = {k: rng.integers(0, 3, len(uids)).astype(float).tolist() for k in ("format", "accuracy", "length")}
    config = algorithm_config(gdpo_reward_keys=list(scores), gdpo_reward_weights=[1.0, 2.0, 0.5])
    ours = ray_trainer.compute_advantage(keyed_batch(scores, uids, [4] * len(uids)), adv_estimator="rllm_grpo", config=config)
    theirs = ray_trainer.compute_advantage(keyed_batch(scores, uids, [4] * len(uids)), adv_estimator="gdpo", config=config)
    rows, tokens = len(uids), 4 * len(uids)
    rescaled = theirs.batch["advantages"].double().numpy() * math.sqrt((rows - 1) / rows * tokens / (tokens - 1))
    np.testing.assert_allclose(ours.batch["advantages"].numpy(), rescaled, rtol=0, atol=1e-5)
    assert theirs.batch["advantages"].abs().max() > 0.5
    assert np.abs(ours.batch["advantages"].numpy() - theirs.batch["advantages"].numpy()).max() > 1e-3  # the rescaling is needed


def test_rllm_rloo_with_reward_keys_matches_by_hand_with_none_groups_of_one_and_shuffled_rows(algorithm_config):
    uids = ["a", "b", "a", "c", "b", "a", "b"]
    scores = {"correct": [1.0, 0.0, 0.0, 1.0, 1.0, None, 1.0], "format": [1.0, None, 0.5, 0.0, 0.5, None, 0.0]}
    config = algorithm_config(adv_estimator="rllm_rloo", gdpo_reward_keys=["correct", "format"], gdpo_reward_weights=[1.0, 0.5])
    data = ray_trainer.compute_advantage(keyed_batch(scores, uids, [3, 5, 1, 6, 2, 4, 6]), adv_estimator="rllm_rloo", config=config)
    expected = gdpo_by_hand(scores, uids, [1.0, 0.5])
    mask = data.batch["response_mask"].numpy()
    np.testing.assert_allclose(data.batch["advantages"].numpy(), expected[:, None] * mask, rtol=0, atol=1e-6)
    assert expected[5] == 0.0  # every key None: unscorable


def test_sum_then_normalize_runs_the_estimator_on_the_weighted_sum(algorithm_config, ref):
    uids = ["a", "a", "a", "b", "b"]
    scores = {"correct": [1.0, 0.0, 1.0, 0.0, 1.0], "format": [0.0, 1.0, None, 1.0, 1.0]}
    config = algorithm_config(gdpo_reward_keys=["correct", "format"], gdpo_reward_weights=[2.0, 1.0], rllm_multi_objective_aggregation="sum_then_normalize")
    data = ray_trainer.compute_advantage(keyed_batch(scores, uids, [2] * 5), adv_estimator="rllm_rloo", config=config)
    combined = np.array([2.0, 1.0, 2.0, 1.0, 3.0])
    expected = ref.per_group(combined, uids, ref.rloo)
    np.testing.assert_allclose(data.batch["advantages"][:, 0].numpy(), expected, atol=1e-6)


def test_an_explicit_non_tensor_batch_needs_no_extension(algorithm_config):
    uids = ["a", "a", "b", "b"]
    scores = {"x": [1.0, 0.0, 2.0, 0.0], "y": [0.0, 1.0, 1.0, 1.0]}
    data = keyed_batch(scores, uids, [3] * 4)
    fn = get_adv_estimator_fn("rllm_rloo")
    advantages, _ = fn(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"],
        index=np.array(uids, dtype=object),  # not the batch's own uid array: no context lookup
        config=algorithm_config(gdpo_reward_keys=["x", "y"]),
        non_tensor_batch=data.non_tensor_batch,
    )
    np.testing.assert_allclose(advantages[:, 0].numpy(), gdpo_by_hand(scores, uids, [1.0, 1.0]), atol=1e-6)


def test_without_the_batch_the_error_names_the_extension(algorithm_config):
    data = keyed_batch({"x": [1.0, 0.0]}, ["a", "a"], [2, 2])
    with pytest.raises(ValueError, match=r"per-key scores did not reach the estimator.*passes non_tensor_batch only to 'gdpo'.*extension is active"):
        get_adv_estimator_fn("rllm_grpo")(
            token_level_rewards=data.batch["token_level_rewards"],
            response_mask=data.batch["response_mask"],
            index=data.non_tensor_batch["uid"],
            config=algorithm_config(gdpo_reward_keys=["x"]),
        )


def test_a_missing_key_is_named_with_the_keys_present(algorithm_config):
    data = keyed_batch({"format": [1.0, 0.0]}, ["a", "a"], [2, 2])
    with pytest.raises(ValueError, match=r"reward key 'accuracy' of algorithm.gdpo_reward_keys is not in the batch \(non_tensor_batch has \['format', 'uid'\]"):
        ray_trainer.compute_advantage(data, adv_estimator="rllm_grpo", config=algorithm_config(gdpo_reward_keys=["format", "accuracy"]))


def test_on_the_v1_path_outside_a_v1_advantage_step_the_keys_are_missing_and_the_message_says_where_they_come_from(algorithm_config, ref):
    """v1's _compute_advantage builds its DataProto from uid and a few tensors only: the shape used here, called outside that method."""
    v1_utils = pytest.importorskip("verl.trainer.ppo.v1.utils")
    uids = ["a", "a", "b", "b"]
    keys = [f"{u}_{s}_0" for s, u in enumerate(uids)]  # one output per session, every session its own key
    config = algorithm_config(gdpo_reward_keys=["format"])
    with pytest.raises(ValueError, match=r"non_tensor_batch has \['uid'\].*v1 trainer.*extra_fields\['reward_extra_info'\].*extension that is active"):
        v1_utils.compute_advantage_for_multi_trajectories(ref.make_batch([1, 0, 1, 0], [2] * 4, uids), keys, "rllm_grpo", config=config)
    with pytest.raises(KeyError, match="prompts"):  # verl's own gdpo fails on the same batch
        v1_utils.compute_advantage_for_multi_trajectories(ref.make_batch([1, 0, 1, 0], [2] * 4, uids), keys, "gdpo", config=config)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"gdpo_reward_weights": [1.0]}, "gdpo_reward_weights is set but algorithm.gdpo_reward_keys is not"),
        ({"rllm_multi_objective_aggregation": "sum_then_normalize"}, "rllm_multi_objective_aggregation is set but algorithm.gdpo_reward_keys is not"),
        ({"gdpo_reward_keys": ["x", "y"], "gdpo_reward_weights": [1.0]}, r"has 1 weights for the 2 keys \['x', 'y'\]"),
        ({"gdpo_reward_keys": ["x", "x"]}, r"names \['x'\] more than once"),
        ({"gdpo_reward_keys": "x"}, "must be a list of non-empty key names"),
        ({"gdpo_reward_keys": ["x"], "gdpo_reward_weights": ["big"]}, "must be a list of finite numbers"),
        ({"gdpo_reward_keys": ["x"], "rllm_multi_objective_aggregation": "gdpo"}, "rllm_multi_objective_aggregation must be one of"),
    ],
)
def test_bad_reward_key_options_are_refused(algorithm_config, extra, message):
    data = keyed_batch({"x": [1.0, 0.0], "y": [0.0, 1.0]}, ["a", "a"], [2, 2])
    with pytest.raises(ValueError, match=message):
        ray_trainer.compute_advantage(data, adv_estimator="rllm_grpo", config=algorithm_config(**extra))


def test_text_or_infinite_scores_are_refused(algorithm_config):
    config = algorithm_config(gdpo_reward_keys=["x"])
    with pytest.raises(ValueError, match="reward key 'x' holds text"):
        ray_trainer.compute_advantage(keyed_batch({"x": ["1", "0"]}, ["a", "a"], [2, 2]), adv_estimator="rllm_grpo", config=config)
    with pytest.raises(ValueError, match=r"row 1 \(uid 'a'\): reward key 'x' is inf"):
        ray_trainer.compute_advantage(keyed_batch({"x": [1.0, math.inf]}, ["a", "a"], [2, 2]), adv_estimator="rllm_grpo", config=config)


def test_a_different_compute_advantage_is_left_alone_with_one_warning(caplog):
    v1_utils = pytest.importorskip("verl.trainer.ppo.v1.utils")
    ours = ray_trainer.compute_advantage

    def compute_advantage(data, adv_estimator, config=None):  # not verl 0.9's parameters
        return data

    # where verl binds it: ray_trainer, v1.utils, and the module that defines it (trainer_utils with verl PR #7237)
    holders = [ray_trainer, v1_utils, *(sys.modules[m] for m in ADVANTAGE_MODULES[1:] if m in sys.modules)]
    for holder in holders:
        holder.compute_advantage = compute_advantage
    try:
        with caplog.at_level(logging.WARNING, logger="rllm_verl.extension"):
            install(REWARD_KEYS)
            install(REWARD_KEYS)
        assert ray_trainer.compute_advantage is compute_advantage and v1_utils.compute_advantage is compute_advantage
        assert extension_status()["reward_keys"].startswith("not applied: its signature is (data, adv_estimator, config=None)")
        warnings = [r.getMessage() for r in caplog.records if r.name == "rllm_verl.extension"]
        assert warnings == [
            "rllm-plugins: reward_keys extension of verl.trainer.ppo.ray_trainer.compute_advantage not applied: its signature is "
            "(data, adv_estimator, config=None), this version of rllm-plugins supports (data, adv_estimator, gamma=1.0, lam=1.0, "
            "num_repeat=1, norm_adv_by_std_in_grpo=True, config=None); verl's own function is used"
        ]
    finally:
        for holder in holders:
            holder.compute_advantage = ours
        install(REWARD_KEYS)
    assert extension_status()["reward_keys"] == "active"


def test_extending_twice_wraps_once(monkeypatch):
    def compute_advantage(data, adv_estimator, gamma=1.0, lam=1.0, num_repeat=1, norm_adv_by_std_in_grpo=True, config=None):
        return reward_keys.current_non_tensor_batch(data.non_tensor_batch["uid"])

    module = types.ModuleType("rllm_fixture_trainer")
    module.compute_advantage = compute_advantage
    monkeypatch.setitem(sys.modules, module.__name__, module)
    fixture = dataclasses.replace(REWARD_KEYS, name="reward_keys_fixture", module=module.__name__, bound_in=(), defined_in=())
    assert install(fixture) == install(fixture) == "active"
    assert module.compute_advantage.__wrapped__ is compute_advantage
    batch = types.SimpleNamespace(non_tensor_batch={"uid": np.array(["a"], dtype=object)})
    assert module.compute_advantage(batch, "x") is batch.non_tensor_batch  # visible during the call
    assert reward_keys.current_non_tensor_batch(batch.non_tensor_batch["uid"]) is None  # and only then


SCRIPT = """
import json, sys, verl
from rllm_verl.extension import extension_status
before = extension_status().get("reward_keys")
loaded = "verl.trainer.ppo.ray_trainer" in sys.modules
from verl.trainer.ppo import ray_trainer
import verl.trainer.ppo.v1.utils as v1
print(json.dumps([loaded, before, extension_status().get("reward_keys"), getattr(ray_trainer.compute_advantage, "rllm_extension", None),
                  v1.compute_advantage is ray_trainer.compute_advantage]))
"""


@pytest.mark.parametrize(
    ("opt_out", "expected"),
    [
        (None, [False, f"pending (applied when {' or '.join(REWARD_KEYS.modules)} is imported)", "active", "reward_keys", True]),
        ("0", [False, "off (RLLM_PLUGINS_VERL_REWARD_KEYS=0)", "off (RLLM_PLUGINS_VERL_REWARD_KEYS=0)", None, True]),
    ],
)
def test_a_fresh_verl_process_extends_on_import_unless_opted_out(opt_out, expected):
    env = {k: v for k, v in os.environ.items() if k != REWARD_KEYS_ENV}
    if opt_out is not None:
        env[REWARD_KEYS_ENV] = opt_out
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == expected


OPTED_OUT = """
import numpy as np, torch, verl
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo import ray_trainer

mask = torch.ones(2, 2, dtype=torch.int64)
data = DataProto.from_dict(
    tensors={"response_mask": mask, "token_level_rewards": torch.ones(2, 2)},
    non_tensors={"uid": np.array(["a", "a"], dtype=object), "x": np.array([1.0, 0.0], dtype=object)},
)
config = OmegaConf.create({"adv_estimator": "rllm_grpo", "norm_adv_by_std_in_grpo": True, "gdpo_reward_keys": ["x"]})
try:
    ray_trainer.compute_advantage(data, adv_estimator="rllm_grpo", config=config)
except ValueError as error:
    print(error)
"""


def test_opted_out_the_error_says_so_and_how_to_turn_it_on():
    env = {**os.environ, REWARD_KEYS_ENV: "0"}
    done = subprocess.run([sys.executable, "-c", OPTED_OUT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (
        done.stdout.strip()
        .splitlines()[-1]
        .endswith(
            "rllm-plugins extends it so rllm_* estimators see it, and that extension is off (RLLM_PLUGINS_VERL_REWARD_KEYS=0); "
            "unset RLLM_PLUGINS_VERL_REWARD_KEYS to turn it on."
        )
    )


@pytest.mark.parametrize(
    ("aggregation", "documented"),
    [("normalize_then_sum", [1.302, -0.592, 0.237, -0.947]), ("sum_then_normalize", [1.0, -1 / 3, 1 / 3, -1.0])],
)
def test_the_worked_example_of_the_docs(algorithm_config, aggregation, documented):
    scores = {"accuracy": [1.0, 0.0, 1.0, 0.0], "format": [1.0, 1.0, 0.0, None]}
    data = keyed_batch(scores, ["p"] * 4, [3, 3, 3, 3])
    config = algorithm_config(
        adv_estimator="rllm_rloo", gdpo_reward_keys=["accuracy", "format"], gdpo_reward_weights=[1.0, 0.5], rllm_multi_objective_aggregation=aggregation
    )
    advantages, _ = get_adv_estimator_fn("rllm_rloo")(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"],
        index=data.non_tensor_batch["uid"],
        config=config,
        non_tensor_batch=data.non_tensor_batch,
    )
    if aggregation == "normalize_then_sum":
        np.testing.assert_allclose(advantages[:, 0].double().numpy(), gdpo_by_hand(scores, ["p"] * 4, [1.0, 0.5]), atol=1e-6)
    np.testing.assert_allclose(advantages[:, 0].double().numpy(), documented, atol=5e-4)


@pytest.mark.parametrize("column", [[1.0, NAN, 1.0, 0.0], np.array([1.0, NAN, 1.0, 0.0]), [1.0, np.float32("nan"), 1.0, None]])
def test_a_nan_score_is_refused_naming_row_uid_and_key_not_read_as_a_missing_one(algorithm_config, column):
    """Before: acc=[1, NaN, 1, 0] with rllm_grpo gave [0.577, 0, 0.577, -1.155], the NaN read as None."""
    data = keyed_batch({"acc": [1.0, 1.0, 1.0, 1.0], "fmt": [1.0, 0.0, 1.0, 0.0]}, ["a"] * 4, [2] * 4)
    data.non_tensor_batch["acc"] = np.asarray(column, dtype=np.float64 if isinstance(column, np.ndarray) else object)
    with pytest.raises(ValueError) as error:
        ray_trainer.compute_advantage(data, adv_estimator="rllm_grpo", config=algorithm_config(gdpo_reward_keys=["acc", "fmt"]))
    assert str(error.value) == ("advantage estimator 'rllm_grpo': row 1 (uid 'a'): reward key 'acc' is nan; scores must be finite, or None for a missing one")


def test_a_none_score_is_still_a_missing_one(algorithm_config):
    scores = {"acc": [1.0, None, 1.0, 0.0]}
    data = keyed_batch(scores, ["a"] * 4, [2] * 4)
    out = ray_trainer.compute_advantage(data, adv_estimator="rllm_rloo", config=algorithm_config(gdpo_reward_keys=["acc"]))
    np.testing.assert_allclose(out.batch["advantages"][:, 0].numpy(), gdpo_by_hand(scores, ["a"] * 4, [1.0]), rtol=1e-6, atol=1e-7)
