"""The numbers against ms-swift's own: where the semantics coincide, ms-swift's real ``compute_advantages`` and
``compute_advantages_dynamic`` and the seam give the same advantages (float32, to 1e-6) and the same rewards (exactly);
every difference the docs name is pinned; and ms-swift's real ``GRPOTrainer._compute_advantages`` runs the selection."""

from __future__ import annotations

import importlib
import types
from collections import defaultdict

import numpy as np
import pytest

pytest.importorskip("swift")
torch = pytest.importorskip("torch")

import rllm_swift  # noqa: E402
from rllm_swift import compute  # noqa: E402

from rllm_plugins.registry import get_estimator  # noqa: E402
from rllm_plugins.shaping import register_reward_shaper  # noqa: E402
from rllm_plugins.shaping.registry import unregister_reward_shaper  # noqa: E402

ADVANTAGE = importlib.import_module("swift.rl_core.advantage")
OWN = {name: getattr(ADVANTAGE, name) for name in ("compute_advantages", "compute_advantages_dynamic")}  # before any install
TOLERANCE = {"atol": 1e-6, "rtol": 1e-6}  # ms-swift computes in float32, the seam in float64 then float32
# (ms-swift's advantage_estimator, its scale_rewards) -> our estimator with the same numbers
EQUAL = [("grpo", "group", "trl_grpo"), ("grpo", "batch", "trl_grpo"), ("grpo", "none", "trl_grpo"), ("rloo", "none", "rloo")]


@pytest.fixture(autouse=True)
def _clean():
    rllm_swift.uninstall()
    yield
    rllm_swift.uninstall()


def batch(rows: int, funcs: int = 2, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    rewards = torch.rand(rows, funcs, generator=generator)
    rewards[1, 0] = float("nan")  # a function that gave None: ms-swift's nansum adds 0
    rewards[6:8] = 1.0  # two equal rewards
    return rewards, torch.tensor([1.0, 0.5][:funcs])


@pytest.mark.parametrize(("theirs", "scale", "ours"), EQUAL)
@pytest.mark.parametrize("kl_in_reward", [False, True])
def test_grouped_mode_equals_ms_swift(theirs, scale, ours, kl_in_reward):
    rewards, weights = batch(16)
    kl = torch.linspace(0.0, 0.3, 16)
    settings = {"scale_rewards": scale, "kl_in_reward": kl_in_reward, "beta": 0.1, "kl_values": kl}
    expected, expected_rewards = OWN["compute_advantages"](rewards, weights, 4, advantage_estimator=theirs, **settings)
    got, got_rewards = compute.grouped(rllm_swift.select(ours), rewards, weights, 4, advantage_estimator=theirs, **settings)
    assert got.dtype == expected.dtype == torch.float32
    torch.testing.assert_close(got, expected, **TOLERANCE)
    assert torch.equal(got_rewards, expected_rewards)


PROMPTS = ["p0", "p0", "p1", "p0", "p1", "p1", "p2", "p3", "p3", "p3"]
REQUESTS = ["a", "b", "c", "d", "e", "e", "f", "g", "h", "h"]  # e and h: two rows (turns) of one request; p2: one request


@pytest.mark.parametrize(("theirs", "scale", "ours"), EQUAL)
def test_request_aware_mode_equals_ms_swift_on_groups_of_two_or_more(theirs, scale, ours):
    rewards, weights = batch(len(PROMPTS), funcs=1, seed=1)
    rewards[5] = rewards[4]  # the rows of one request carry its reward (ms-swift checks it)
    rewards[9] = rewards[8]
    expected, _ = OWN["compute_advantages_dynamic"](rewards, weights, PROMPTS, REQUESTS, advantage_estimator=theirs, scale_rewards=scale)
    got, _ = compute.request_aware(rllm_swift.select(ours), rewards, weights, PROMPTS, REQUESTS, scale_rewards=scale)
    several = [p != "p2" for p in PROMPTS]
    torch.testing.assert_close(got[several], expected[several], **TOLERANCE)
    if ours == "rloo":  # a group of one request: ms-swift's rloo gives 0, ours keeps the reward (r - mean of none)
        assert expected[6].item() == 0.0 and got[6].item() == pytest.approx(rewards[6, 0].item())
    else:
        assert expected[6].item() == got[6].item() == 0.0
    assert torch.equal(got[4], got[5]) and torch.equal(got[8], got[9])  # every row of a request has its advantage


def test_the_defaults_of_our_grpo_and_ms_swift_grpo_differ_only_by_std_and_epsilon():
    rewards, weights = batch(8)
    theirs, combined = OWN["compute_advantages"](rewards, weights, 4)
    ours, _ = compute.grouped(rllm_swift.select("grpo"), rewards, weights, 4)
    values = combined.double().numpy().reshape(-1, 4)
    centred = values - values.mean(axis=1, keepdims=True)
    torch.testing.assert_close(theirs.double(), torch.as_tensor((centred / (values.std(axis=1, ddof=1, keepdims=True) + 1e-4)).ravel()), **TOLERANCE)
    torch.testing.assert_close(ours.double(), torch.as_tensor((centred / (values.std(axis=1, ddof=0, keepdims=True) + 1e-6)).ravel()), **TOLERANCE)
    assert not torch.allclose(ours, theirs, atol=1e-3)


def test_ms_swift_rloo_with_group_scaling_divides_by_the_reward_std_which_our_rloo_never_does():
    rewards, weights = batch(8)
    theirs, combined = OWN["compute_advantages"](rewards, weights, 4, advantage_estimator="rloo", scale_rewards="group")
    ours, _ = compute.grouped(rllm_swift.select("rloo"), rewards, weights, 4, scale_rewards="group")
    std = combined.view(-1, 4).std(dim=1).repeat_interleave(4)
    torch.testing.assert_close(theirs, ours / (std + 1e-4), **TOLERANCE)


def test_ms_swift_reinforce_plus_plus_is_not_our_reinforce_plus_plus_baseline():
    rewards, weights = batch(8)
    theirs, combined = OWN["compute_advantages"](rewards, weights, 4, advantage_estimator="reinforce_plus_plus", scale_rewards="batch")
    ours, _ = compute.grouped(rllm_swift.select("reinforce_plus_plus_baseline"), rewards, weights, 4, scale_rewards="batch")
    centred = combined - combined.view(-1, 4).mean(dim=1).repeat_interleave(4)
    torch.testing.assert_close(theirs, centred / (centred.std() + 1e-4), **TOLERANCE)  # ms-swift: no mean taken off, sample std, 1e-4
    torch.testing.assert_close(ours, (centred - centred.mean()) / (centred.std(correction=0) + 1e-6), **TOLERANCE)  # ours: whitened


def test_transforms_and_shapers_run_around_the_estimator_and_their_metrics_are_kept():
    rewards, weights = batch(8)

    @register_reward_shaper("bonus_for_the_best", description="0.5 to each group's best reward")
    def bonus(rewards: np.ndarray, offsets: np.ndarray, *, bonus: float = 0.5) -> np.ndarray:
        best = np.maximum.reduceat(rewards, offsets[:-1])
        return np.where(rewards == np.repeat(best, np.diff(offsets)), bonus, 0.0)

    try:
        selection = rllm_swift.select("rloo", transforms=[{"name": "clip", "min": -0.1, "max": 0.1}], shapers=["bonus_for_the_best"])
        got, logged = compute.grouped(selection, rewards, weights, 4)
    finally:
        unregister_reward_shaper("bonus_for_the_best")
    combined = logged.double().numpy()
    shaped = combined + bonus(combined, np.array([0, 4, 8]))
    expected = np.clip(get_estimator("rloo").batched_form(shaped, np.array([0, 4, 8])), -0.1, 0.1)
    torch.testing.assert_close(got, torch.as_tensor(expected, dtype=torch.float32), **TOLERANCE)
    assert any(key.startswith("transform/") for key in selection.metrics) and any(key.startswith("shaping/") for key in selection.metrics)


def test_scale_rewards_gdpo_is_refused_with_an_rllm_estimator():
    rewards, weights = batch(8)
    with pytest.raises(ValueError, match="scale_rewards='gdpo'"):
        compute.grouped(rllm_swift.select("rloo"), rewards, weights, 4, scale_rewards="gdpo")


def stand_in_trainer(dynamic: bool, estimator: str = "grpo", scale: str = "group") -> types.SimpleNamespace:
    """What ``GRPOTrainer._compute_advantages`` reads of its trainer, for a call outside a training loop."""
    return types.SimpleNamespace(
        model=types.SimpleNamespace(training=True),
        num_generations=4,
        num_generations_eval=4,
        reward_weights=torch.tensor([1.0, 0.5]),
        reward_func_names=["first", "second"],
        advantage_estimator=estimator,
        scale_rewards=scale,
        kl_in_reward=False,
        beta=0.0,
        dynamic_num_samples=dynamic,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _logs={"rewards": defaultdict(list)},
        _get_last_indices=lambda ids: [max(i for i, r in enumerate(ids) if r == rid) for rid in dict.fromkeys(ids)],
    )


@pytest.mark.parametrize("dynamic", [False, True])
def test_ms_swift_trainer_method_runs_the_selected_estimator_in_both_modes(dynamic):
    trainer_module = importlib.import_module("swift.rlhf_trainers.grpo_trainer")
    method = trainer_module.GRPOTrainer._compute_advantages
    rewards, _ = batch(8)
    samples = [types.SimpleNamespace(prompt_id=f"p{i // 4}", request_id=f"r{i}") for i in range(8)]
    own = method(stand_in_trainer(dynamic), samples, rewards, [])
    rllm_swift.use("rloo")
    trainer = stand_in_trainer(dynamic)
    got = method(trainer, samples, rewards, [])
    combined = (rewards * torch.tensor([1.0, 0.5])).nansum(dim=1).double().numpy()
    expected = get_estimator("rloo").batched_form(combined, np.array([0, 4, 8]))
    torch.testing.assert_close(got, torch.as_tensor(expected, dtype=torch.float32), **TOLERANCE)
    assert not torch.allclose(got, own)
    assert trainer._metrics["train"]["reward"]  # ms-swift logs its own reward metrics as before
