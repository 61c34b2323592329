"""A real axolotl GRPO step on CPU through ``plugins: [rllm_axolotl.RLLMAdvantagePlugin]`` and an ``rllm:`` block.

axolotl's own entry points (``load_cfg``, ``load_preference_datasets``, ``train``) run in a subprocess (``step_worker.py``:
axolotl keeps its plugins in a process-wide singleton) with a tiny local Qwen2; the advantages the step trained on are
checked against an independent computation on the same gathered rewards.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("axolotl")

WORKER = Path(__file__).resolve().parent / "step_worker.py"
BLOCKS = [
    {"adv_estimator": "rloo"},
    {"adv_estimator": "trl_grpo"},
    {"adv_estimator": "rloo", "advantage_transforms": [{"name": "clip", "max": 0.5}]},
]


def rloo(rewards: np.ndarray, group: int) -> np.ndarray:
    """Leave-one-out baseline: each reward minus the mean of the others in its group."""
    grouped = rewards.reshape(-1, group)
    others = (grouped.sum(axis=1, keepdims=True) - grouped) / (group - 1)
    return (grouped - others).reshape(-1)


def trl_group_scaled(rewards: np.ndarray, group: int) -> np.ndarray:
    """TRL's GRPOTrainer (and so AxolotlGRPOTrainer): (r - group mean) / (group std, unbiased, + 1e-4)."""
    grouped = rewards.reshape(-1, group)
    return ((grouped - grouped.mean(axis=1, keepdims=True)) / (grouped.std(axis=1, ddof=1, keepdims=True) + 1e-4)).reshape(-1)


@pytest.fixture(scope="module")
def runs() -> list[dict]:
    done = subprocess.run([sys.executable, str(WORKER), json.dumps(BLOCKS)], capture_output=True, text=True, timeout=900, check=False)
    results = [json.loads(line.removeprefix("RESULT ")) for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and len(results) == len(BLOCKS), done.stdout[-3000:] + done.stderr[-6000:]
    return results


def test_the_trainer_is_axolotls_grpo_trainer_with_the_mixin(runs):
    for run in runs:
        assert run["trainer"] == ["RLLMAxolotlGRPOTrainer", "RLLMAdvantageMixin", "AxolotlGRPOTrainer"]


def test_rloo_advantages_are_the_leave_one_out_baseline_of_the_gathered_rewards(runs):
    run = runs[0]
    rewards = np.array(run["rewards"])
    assert len(rewards) == 8 and run["num_generations"] == 4
    assert np.ptp(rewards.reshape(2, 4), axis=1).max() > 0  # rewards differ within a group: the numbers mean something
    np.testing.assert_allclose(run["advantages"], rloo(rewards, 4), atol=1e-6)
    assert run["provenance"].startswith("rloo [built-in]")
    assert run["log"]["rllm_provenance"] == run["provenance"]
    assert "advantage/all_groups/mean" in run["log"]


def test_trl_grpo_gives_axolotls_own_grpo_advantages(runs):
    run = runs[1]
    rewards = np.array(run["rewards"])
    np.testing.assert_allclose(run["advantages"], trl_group_scaled(rewards, 4), atol=1e-5)


def test_an_advantage_transform_from_the_yaml_applies_after_the_estimator(runs):
    run = runs[2]
    rewards = np.array(run["rewards"])
    np.testing.assert_allclose(run["advantages"], np.minimum(rloo(rewards, 4), 0.5), atol=1e-6)
    assert 'transforms clip{"max":0.5}' in run["provenance"]
