"""The verl bridge: 16-bit rewards summed in float64, estimator options checked, one rule for estimator outputs, ids."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
from rllm_verl.compute.outcome import compute_rllm_advantage
from verl.trainer.ppo.ray_trainer import compute_advantage

from rllm_plugins import register_rllm_adv_estimator, unregister_rllm_adv_estimator

MASK = torch.ones(2, 2, dtype=torch.int64)
UIDS = np.array(["p", "p"], dtype=object)


def _grpo_by_hand(r0: float, r1: float) -> list[float]:
    mean = (r0 + r1) / 2
    std = (((r0 - mean) ** 2 + (r1 - mean) ** 2) / 2) ** 0.5
    return [(r0 - mean) / (std + 1e-6), (r1 - mean) / (std + 1e-6)]


def test_bf16_rewards_are_summed_in_float64(ref, algorithm_config):
    rewards = torch.tensor([[10.0, 0.0098], [10.0, 0.0198]], dtype=torch.bfloat16)
    assert rewards.sum(-1).tolist() == [10.0, 10.0]  # a bf16 row sum loses the difference
    tokens = rewards.tolist()  # the bf16 values as Python floats: summed exactly here
    expected = _grpo_by_hand(sum(tokens[0]), sum(tokens[1]))
    data = ref.make_batch([0.0, 0.0], [2, 2], ["p", "p"], response_length=2)
    data.batch["token_level_rewards"] = rewards
    out = compute_advantage(data, adv_estimator="rllm_grpo", config=algorithm_config())
    assert out.batch["advantages"].dtype == torch.bfloat16
    np.testing.assert_allclose(out.batch["advantages"].float().numpy(), np.array([expected, expected]).T, rtol=1e-2)
    assert expected[0] < -0.99 and expected[1] > 0.99


def test_fp16_rows_whose_sum_passes_65504_stay_finite(algorithm_config):
    rewards = torch.stack([torch.full((100,), 1000.0), torch.full((100,), 999.0)]).to(torch.float16)
    assert torch.isinf(rewards.sum(-1)).all()
    out, _ = compute_rllm_advantage("grpo", rewards, torch.ones(2, 100), UIDS, algorithm_config())
    expected = _grpo_by_hand(100 * 1000.0, 100 * 999.0)
    np.testing.assert_allclose(out[:, 0].float().numpy(), expected, rtol=1e-3)


def test_float32_rewards_keep_their_values(algorithm_config):
    rewards = torch.tensor([[0.25, 0.5], [0.125, 0.0]])
    out, _ = compute_rllm_advantage("grpo", rewards, MASK, UIDS, algorithm_config())
    np.testing.assert_allclose(out[:, 0].numpy(), _grpo_by_hand(0.75, 0.125), rtol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"epsilom": 0.5},
            "advantage estimator 'rllm_grpo': algorithm.rllm_estimator_kwargs: unknown option 'epsilom' for estimator 'grpo' "
            "(rllm-plugins (built-in)), which accepts: epsilon. Did you mean 'epsilon'?",
        ),
        (
            {"epsilon": "1e-4"},
            "advantage estimator 'rllm_grpo': algorithm.rllm_estimator_kwargs: option 'epsilon' of estimator 'grpo' must be a number >= 0, got str '1e-4'",
        ),
        (
            {"epsilon": -1e-4},
            "advantage estimator 'rllm_grpo': algorithm.rllm_estimator_kwargs: option 'epsilon' of estimator 'grpo' must be a finite number >= 0, got -0.0001",
        ),
    ],
)
def test_estimator_options_are_checked(algorithm_config, kwargs, message):
    with pytest.raises(ValueError) as error:
        compute_rllm_advantage("grpo", torch.ones(2, 2), MASK, UIDS, algorithm_config(rllm_estimator_kwargs=kwargs))
    assert str(error.value) == message


def test_a_two_dimensional_uid_array_is_a_clear_error(algorithm_config):
    uids = np.array([("task", 1), ("task", 1)], dtype=object)
    with pytest.raises(ValueError, match=r"index \(uid\) has shape \(2, 2\); it needs one id per row \(1-D\)"):
        compute_rllm_advantage("grpo", torch.ones(2, 2), MASK, uids, algorithm_config())


def test_an_unhashable_uid_is_a_clear_error(algorithm_config):
    uids = np.empty(2, dtype=object)
    uids[0], uids[1] = ["task"], ["task"]
    with pytest.raises(ValueError, match=r"row 0 has uid \['task'\], a list; a uid must be hashable"):
        compute_rllm_advantage("grpo", torch.ones(2, 2), MASK, uids, algorithm_config())


@pytest.fixture
def user_estimator():
    """Register a user estimator under a fresh name whose output the test chooses; unregister after."""
    names = []

    def make(name, produce):
        @register_rllm_adv_estimator(name)
        def estimator(rewards, **_):
            return produce(rewards), produce(rewards)

        names.append(name)
        return name

    yield make
    for name in names:
        unregister_rllm_adv_estimator(name)


@pytest.mark.parametrize(
    "produce",
    [
        lambda rewards: [torch.tensor(r - r.mean(), dtype=torch.bfloat16) for r in rewards],
        lambda rewards: [torch.tensor(r - r.mean(), requires_grad=True) for r in rewards],
        lambda rewards: ((float(x - r.mean()) for x in r) for r in rewards),  # generators, inside and out
        lambda rewards: [list(r - r.mean()) for r in rewards],
    ],
    ids=["bf16-tensors", "requires-grad", "generators", "lists"],
)
def test_estimator_outputs_follow_one_rule(algorithm_config, user_estimator, produce):
    name = user_estimator("h_outputs_rule", produce)
    out, _ = compute_rllm_advantage(name, torch.tensor([[1.0, 0.0], [0.0, 0.0]]), MASK, UIDS, algorithm_config())
    np.testing.assert_allclose(out[:, 0].numpy(), [0.5, -0.5])


def test_an_output_outside_the_rule_names_the_estimator(algorithm_config, user_estimator):
    name = user_estimator("h_outputs_bad", lambda rewards: [{"a": 1.0} for _ in rewards])
    with pytest.raises(ValueError, match=r"estimator 'h_outputs_bad' returned dict \{'a': 1.0\}; advantages must be a sequence, numpy array or torch tensor"):
        compute_rllm_advantage(name, torch.ones(2, 2), MASK, UIDS, algorithm_config())


def test_an_advantage_that_overflows_16_bit_rewards_is_an_error(algorithm_config):
    """fp16 rewards 60000 and -60000: rloo gives +-120000, past fp16's 65504 (before: inf and -inf, in silence)."""
    rewards = torch.tensor([[60000.0, 0.0], [-60000.0, 0.0]], dtype=torch.float16)
    with pytest.raises(
        ValueError, match=r"^advantage estimator 'rllm_rloo': advantage 120000\.0 of row 0 \(uid 'p'\) overflows torch\.float16 \(largest 65504\)"
    ):
        compute_rllm_advantage("rloo", rewards, MASK, UIDS, algorithm_config(adv_estimator="rllm_rloo"))
    out, _ = compute_rllm_advantage("rloo", rewards.to(torch.bfloat16), MASK, UIDS, algorithm_config(adv_estimator="rllm_rloo"))
    assert out[:, 0].tolist() == [119808.0, -119808.0]  # bf16 has the range; 120000 rounds to 234 * 512


def test_a_float32_advantage_past_float32s_range_is_an_error_naming_the_row(algorithm_config):
    """rloo on [3e38, -3e38]: +-6e38, past float32's 3.4e38 (before: written as inf and -inf)."""
    rewards = torch.tensor([[3e38, 0.0], [-3e38, 0.0]], dtype=torch.float32)
    advantage = 2 * float(rewards[0, 0])
    with pytest.raises(ValueError) as error:
        compute_rllm_advantage("rloo", rewards, MASK, UIDS, algorithm_config(adv_estimator="rllm_rloo"))
    assert str(error.value) == (
        f"advantage estimator 'rllm_rloo': advantage {advantage} of row 0 (uid 'p') overflows torch.float32 (largest 3.40282e+38), "
        "the dtype of token_level_rewards; compute rewards in float64, or scale them down"
    )
    out, _ = compute_rllm_advantage("rloo", rewards.double(), MASK, UIDS, algorithm_config(adv_estimator="rllm_rloo"))
    assert out[:, 0].tolist() == [advantage, -advantage]  # float64 has the range
