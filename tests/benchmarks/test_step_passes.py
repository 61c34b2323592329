"""The numpy passes the benchmark holds each verl step-level estimator to are the passes it makes: recorded, not listed.

``benchmarks.step_level.ESTIMATOR_PASSES`` names, for each step-level ``rllm_*`` estimator, the functions of
:mod:`rllm_plugins.steps.turns` it calls on (B, T) arrays, in order; its target compares the estimator's time with
those calls timed together. Here every such call made by verl's ``compute_advantage`` is recorded, so an estimator
that adds a pass (or stops making one) fails until the benchmark's reference follows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("verl")

import rllm_verl.compute.steps as verl_steps
from omegaconf import OmegaConf
from verl.trainer.ppo.ray_trainer import compute_advantage

import rllm_plugins.steps.turns as turns_module
from benchmarks.step_level import ESTIMATOR_PASSES, VERL_STEP_LEVEL, make_multi_turn_dataproto, passes_row, step_parts

PASS_FUNCTIONS = ("find_turns", "turn_rewards", "turn_anchor_codes", "spread_to_tokens")


def record_passes(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[str]:
    """The list every call of a pass function through ``module``'s names is appended to, in order."""
    calls: list[str] = []
    for function in PASS_FUNCTIONS:
        original = getattr(module, function)

        def record(*args: Any, _original: Any = original, _function: str = function, **kwargs: Any) -> Any:
            calls.append(_function)
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, function, record)
    return calls


def _recorded(monkeypatch: pytest.MonkeyPatch, name: str) -> list[str]:
    calls = record_passes(monkeypatch, verl_steps)
    data = make_multi_turn_dataproto(64, 256, 8)
    config = OmegaConf.create({"adv_estimator": name, "norm_adv_by_std_in_grpo": True, "gamma": 0.95, "lam": 1.0})
    compute_advantage(data, adv_estimator=name, config=config)
    return calls


@pytest.mark.parametrize("name", VERL_STEP_LEVEL)
def test_each_estimator_makes_the_passes_it_is_held_to(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    assert _recorded(monkeypatch, name) == list(ESTIMATOR_PASSES[name])


def plain_spread(mask: np.ndarray, rewards: np.ndarray) -> np.ndarray:
    """Each model token of a turn holds the turn's reward (its tokens' rewards up to the next turn, from the row's start
    for the first), written as a loop over the rows and their tokens."""
    out = np.zeros(mask.shape, dtype=np.float32)
    for row in range(mask.shape[0]):
        starts = [t for t in range(mask.shape[1]) if mask[row, t] != 0 and (t == 0 or mask[row, t - 1] == 0)]
        for k, start in enumerate(starts):
            stop = starts[k + 1] if k + 1 < len(starts) else mask.shape[1]
            reward = float(rewards[row, 0 if k == 0 else start : stop].sum(dtype=np.float32))
            t = start
            while t < mask.shape[1] and mask[row, t] != 0:
                out[row, t] = reward
                t += 1
    return out


@pytest.mark.parametrize("name", sorted(ESTIMATOR_PASSES))
def test_the_passes_row_of_each_estimator_makes_its_passes_and_writes_its_outputs(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    calls = record_passes(monkeypatch, turns_module)
    data = make_multi_turn_dataproto(16, 128, 8)
    row = step_parts(data)[passes_row(name)]
    calls.clear()  # step_parts finds the turns once for the parts timed alone
    outputs = row()
    assert calls == list(ESTIMATOR_PASSES[name])
    expected = plain_spread(data.batch["response_mask"].numpy(), data.batch["token_level_rewards"].numpy())
    assert isinstance(outputs, list) and len(outputs) == ESTIMATOR_PASSES[name].count("spread_to_tokens")
    for output in outputs:
        np.testing.assert_allclose(output, expected, rtol=1e-6, atol=0)
        assert np.array_equal(output != 0, expected != 0)


def test_every_step_level_estimator_has_its_passes() -> None:
    assert set(ESTIMATOR_PASSES) == set(VERL_STEP_LEVEL)
