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

from benchmarks.step_level import ESTIMATOR_PASSES, VERL_STEP_LEVEL, make_multi_turn_dataproto, passes_row, step_parts

PASS_FUNCTIONS = ("find_turns", "turn_rewards", "turn_anchor_codes", "spread_to_tokens")


def _recorded(monkeypatch: pytest.MonkeyPatch, name: str) -> list[str]:
    calls: list[str] = []
    for function in PASS_FUNCTIONS:
        original = getattr(verl_steps, function)

        def record(*args: Any, _original: Any = original, _function: str = function, **kwargs: Any) -> Any:
            calls.append(_function)
            return _original(*args, **kwargs)

        monkeypatch.setattr(verl_steps, function, record)
    data = make_multi_turn_dataproto(64, 256, 8)
    config = OmegaConf.create({"adv_estimator": name, "norm_adv_by_std_in_grpo": True, "gamma": 0.95, "lam": 1.0})
    compute_advantage(data, adv_estimator=name, config=config)
    return calls


@pytest.mark.parametrize("name", VERL_STEP_LEVEL)
def test_each_estimator_makes_the_passes_it_is_held_to(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    assert _recorded(monkeypatch, name) == list(ESTIMATOR_PASSES[name])


def test_every_step_level_estimator_has_passes_and_its_row_runs_them() -> None:
    assert set(ESTIMATOR_PASSES) == set(VERL_STEP_LEVEL)
    data = make_multi_turn_dataproto(16, 128, 8)
    parts = step_parts(data)
    mask = data.batch["response_mask"].numpy()
    for name, passes in ESTIMATOR_PASSES.items():
        outputs = parts[passes_row(name)]()
        assert isinstance(outputs, list) and len(outputs) == passes.count("spread_to_tokens")  # every output alive at once
        for output in outputs:  # each spread covers exactly the model tokens
            assert output.shape == mask.shape and np.array_equal(output != 0, (mask != 0) & (output != 0))
