"""A real ms-swift GRPO training step on CPU with a tiny local model, the estimator selected by the shipped plugin file.

ms-swift runs in a child process as its command line would (``rlhf_main`` with ``--external_plugins``): the shipped
``rllm_swift/plugin.py`` selects ``RLLM_SWIFT_ESTIMATOR``, and a second plugin file written here records what ms-swift's
trainer handed to ``compute_advantages`` and got back, so the step's advantages are checked against the estimator's own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("swift")
pytest.importorskip("torch")

import rllm_swift

from rllm_plugins.registry import get_estimator

REWARD = """
from swift.rewards import orms


class LengthReward:
    def __init__(self, args=None, **kwargs):
        pass

    def __call__(self, completions, **kwargs):
        return [float(len(c) % 3) for c in completions]


orms["length_reward"] = LengthReward
"""

RECORDER = """
import json, os
import swift.rl_core.advantage as advantage

inner = advantage.compute_advantages


def recorded(rewards_per_func, reward_weights, num_generations, *args, **kwargs):
    advantages, rewards = inner(rewards_per_func, reward_weights, num_generations, *args, **kwargs)
    with open(os.environ["RECORD"], "a") as f:
        f.write(json.dumps({"seam": getattr(inner, "__rllm_swift__", None), "rewards": rewards.tolist(),
                            "advantages": advantages.tolist(), "num_generations": num_generations}) + "\\n")
    return advantages, rewards


advantage.compute_advantages = recorded
"""

STEP = """
import sys
from swift.pipelines import rlhf_main

work = sys.argv[1]
rlhf_main([
    "--rlhf_type", "grpo", "--model", f"{work}/model", "--model_type", "qwen2", "--template", "qwen",
    "--dataset", f"{work}/data.jsonl", "--external_plugins", *sys.argv[2:],
    "--reward_funcs", "length_reward", "--num_generations", "4", "--per_device_train_batch_size", "4",
    "--max_completion_length", "8", "--max_steps", "1", "--output_dir", f"{work}/out", "--torch_dtype", "float32",
    "--tuner_type", "full", "--report_to", "none", "--save_strategy", "no", "--logging_steps", "1",
    "--dataset_num_proc", "1", "--dataloader_num_workers", "0", "--use_vllm", "false",
])
print("one step trained")
"""


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rllm_plugins.tiny import build_tiny_model, build_tiny_tokenizer

    work = tmp_path_factory.mktemp("swift")
    prompts = ["say hi", "count 1 2 3", "hello", "yes or no"]
    tokenizer = build_tiny_tokenizer(prompts * 4)
    build_tiny_model(tokenizer).save_pretrained(work / "model")
    tokenizer.save_pretrained(work / "model")
    (work / "data.jsonl").write_text("".join(json.dumps({"messages": [{"role": "user", "content": p}]}) + "\n" for p in prompts))
    (work / "reward.py").write_text(REWARD)
    (work / "recorder.py").write_text(textwrap.dedent(RECORDER))
    (work / "step.py").write_text(STEP)
    return work


def train_one_step(work: Path, record: Path, **environment: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RECORD": str(record), "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "", "TOKENIZERS_PARALLELISM": "false", **environment}
    plugins = [str(work / "reward.py"), str(rllm_swift.PLUGIN_FILE), str(work / "recorder.py")]
    done = subprocess.run([sys.executable, str(work / "step.py"), str(work), *plugins], env=env, capture_output=True, text=True, timeout=540, check=False)
    assert done.returncode == 0 and "one step trained" in done.stdout, done.stdout[-3000:] + done.stderr[-5000:]
    return done


def test_a_grpo_step_trains_with_the_selected_estimator(work: Path, tmp_path: Path):
    record = tmp_path / "calls.jsonl"
    done = train_one_step(work, record, RLLM_SWIFT_ESTIMATOR="rloo", RLLM_SWIFT_ADVANTAGE_TRANSFORMS='[{"name": "clip", "min": -1.0, "max": 1.0}]')
    assert "compute_advantages and compute_advantages_dynamic run estimator 'rloo'" in done.stdout + done.stderr
    (call,) = [json.loads(line) for line in record.read_text().splitlines()]
    assert call["seam"] == "compute_advantages" and call["num_generations"] == 4
    rewards = np.array(call["rewards"])
    expected = np.clip(get_estimator("rloo").batched_form(rewards, np.arange(0, rewards.size + 1, 4)), -1.0, 1.0)
    np.testing.assert_allclose(call["advantages"], expected, atol=1e-6, rtol=1e-6)


def test_with_the_opt_out_the_same_step_uses_ms_swift_own_estimator(work: Path, tmp_path: Path):
    record = tmp_path / "calls.jsonl"
    train_one_step(work, record, RLLM_SWIFT_ESTIMATOR="rloo", RLLM_SWIFT_DISABLE="1")
    (call,) = [json.loads(line) for line in record.read_text().splitlines()]
    assert call["seam"] is None  # ms-swift's own grpo: (r - mean) / (sample std + 1e-4)
    rewards = np.array(call["rewards"]).reshape(-1, 4)
    expected = (rewards - rewards.mean(axis=1, keepdims=True)) / (rewards.std(axis=1, ddof=1, keepdims=True) + 1e-4)
    np.testing.assert_allclose(call["advantages"], expected.ravel(), atol=1e-5, rtol=1e-5)
