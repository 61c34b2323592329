"""The multi-turn TRL recipes in examples/trl_multi_turn run (short), and what their docstrings promise holds."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "trl_multi_turn"


def load(name: str) -> ModuleType:
    """Import an example file as a module (it puts its own folder on ``sys.path`` for :mod:`game`)."""
    spec = importlib.util.spec_from_file_location(f"trl_multi_turn_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "script, output", [("rollout_func.py", r"episodes that found the digit: first steps"), ("environment_factory.py", r"turns per episode, by step: \[")]
)
def test_the_recipe_runs_as_a_script(tmp_path, script, output):
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), "--steps", "1", "--output-dir", str(tmp_path / "out")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(output, done.stdout), done.stdout[-2000:]


def test_the_rollout_func_contract_its_docstring_states(tmp_path, monkeypatch):
    """Prompts arrive repeated num_generations times; env_mask is 1 on the model's tokens; (B, T) per-turn advantages."""
    example = load("rollout_func")
    seen: list[dict[str, Any]] = []
    original = example.rollout

    def recording(prompts: list[str], trainer: Any) -> dict[str, Any]:
        out = original(prompts, trainer)
        seen.append({"prompts": list(prompts), "out": out, "num_generations": trainer.num_generations})
        return out

    monkeypatch.setattr(example, "rollout", recording)
    rewards = example.main(["--steps", "2", "--output-dir", str(tmp_path / "out")])
    assert len(rewards) == 2 and len(seen) == 2
    for call in seen:
        prompts, out, g = call["prompts"], call["out"], call["num_generations"]
        assert len(prompts) == 32 and all(prompts[i] == prompts[i - i % g] for i in range(len(prompts)))  # each prompt g times in a row
        for ids, mask, logprobs in zip(out["completion_ids"], out["env_mask"], out["logprobs"], strict=True):
            assert len(ids) == len(mask) == len(logprobs) and mask[0] == 1  # the model acts first
            assert all(lp == 0.0 for lp, m in zip(logprobs, mask, strict=True) if m == 0)


def test_the_environment_factory_recipe_gives_per_turn_advantages_when_the_model_calls_the_tool(tmp_path):
    """As in test_tool_loops.py, generate is scripted: a random tiny model never writes a tool call."""
    example = load("environment_factory")
    tokenizer = example.build_tiny_tool_tokenizer()
    from rllm_plugins.tiny import build_tiny_model

    trainer = example.build_trainer(build_tiny_model(tokenizer, seed=0), tokenizer, steps=1, output_dir=str(tmp_path / "out"), max_completion_length=96)
    calls = {"count": 0}

    def generate(input_ids: torch.Tensor, **_: Any) -> torch.Tensor:
        texts = []
        for row, ids in enumerate(input_ids.tolist()):
            if calls["count"] == 0 and row % 4 != 3:  # first turn: completions 0-2 of each group guess; the hidden digit, then 5, then 7
                prompt = re.search(r"user\n(\d+:)", tokenizer.decode(ids)).group(1)
                digit = [example.hidden_digit(prompt), 5, 7][row % 4]
                texts.append(f'<tool_call>\n{{"name": "guess", "arguments": {{"digit": {digit}}}}}\n</tool_call><|im_end|>')
            else:
                texts.append("done<|im_end|>")
        calls["count"] += 1
        rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        width = max(map(len, rows))
        padded = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])
        return torch.cat([input_ids, padded], dim=-1)

    with patch.object(trainer.model, "generate", side_effect=generate):
        trainer.train()
    result = trainer.last_step_advantages
    assert np.diff(result.offsets).tolist() == [2, 2, 2, 1] * 2  # a guess and a closing turn; the fourth never called the tool
    assert trainer.last_reward_batch.rewards.tolist() == [1.0, 0.0, 0.0, 0.0] * 2  # found by the first guess only
    logged = next(e for e in trainer.state.log_history if "loss" in e)
    assert logged["tools/call_frequency"] == pytest.approx(6 / 8) and logged["batch/all_groups/turns/mean"] == pytest.approx(1.75)
    assert np.abs(result.values).max() > 0
