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

from .conftest import tool_path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "trl_multi_turn"


def load(name: str) -> ModuleType:
    """Import an example file as a module (it puts its own folder on ``sys.path`` for :mod:`game`)."""
    spec = importlib.util.spec_from_file_location(f"trl_multi_turn_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(tmp_path: Path, script: str, *args: str) -> str:
    """The script's standard output, run as a user runs it (so it pins its kernels)."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args, "--output-dir", str(tmp_path / "out")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_rollout_func_recipe_runs_as_a_script(tmp_path):
    assert re.search(r"episodes that found the digit: first steps", run_script(tmp_path, "rollout_func.py", "--steps", "1"))


def quoted_output(marker: str) -> str:
    """The ``text`` block after ``<!-- marker -->`` in the recipes' README."""
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    found = re.search(rf"<!-- {re.escape(marker)} -->\n```text\n(.*?)```", readme, re.DOTALL)
    assert found, f"no block marked {marker!r} in examples/trl_multi_turn/README.md"
    return found.group(1)


def z_scores(values: list[float]) -> list[float]:
    """Population z-scores with eps 1e-6; a single value gives 0."""
    if len(values) == 1:
        return [0.0]
    mean = sum(values) / len(values)
    std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
    return [(v - mean) / (std + 1e-6) for v in values]


@pytest.mark.parametrize("script", [pytest.param(f"{path}.py", marks=tool_path(path)) for path in ("environment_factory", "tools")])
def test_the_tool_recipe_prints_multi_turn_advantages_its_readme_quotes(tmp_path, script):
    """The warm-started tiny model calls the tool: episodes of several turns, gigpo's per-turn advantages are not grpo's, and the README quotes the run."""
    printed = "".join(line + "\n" for line in run_script(tmp_path, script).splitlines() if not line.startswith(("{", "[")))
    assert printed == quoted_output(f"{script} output")  # TRL's own log lines ({...}, [transformers]) left out

    rows = printed.splitlines()[4:]  # the table's columns: episode, results, reward, gigpo's per turn, grpo's
    results = [[] if line[9:18].strip() == "-" else line[9:18].split() for line in rows]
    rewards = [float(line[20:26]) for line in rows]
    gigpo = [[float(v) for v in line[28:58].split()] for line in rows]
    grpo = [float(line[60:]) for line in rows]
    assert len(rows) == 8 and max(map(len, gigpo)) >= 2 and 0 < sum(rewards) < 8

    gamma, weight = 0.9, 1.0  # the recipe's gigpo options
    anchors = [["prompt", *r][: len(turns)] for r, turns in zip(results, gigpo, strict=True)]  # turn t follows result t - 1
    returns = [[gamma ** (len(turns) - 1 - t) * reward for t in range(len(turns))] for turns, reward in zip(gigpo, rewards, strict=True)]
    episode = z_scores(rewards)
    step = [[0.0] * len(turns) for turns in gigpo]
    for state in {s for a in anchors for s in a}:
        members = [(b, t) for b, a in enumerate(anchors) for t, s in enumerate(a) if s == state]
        for (b, t), z in zip(members, z_scores([returns[b][t] for b, t in members]), strict=True):
            step[b][t] = z
    for b in range(8):
        assert gigpo[b] == pytest.approx([episode[b] + weight * s for s in step[b]], abs=6e-4)
        assert grpo[b] == pytest.approx(episode[b], abs=6e-4)
    assert any(turns != pytest.approx([g] * len(turns), abs=1e-3) for turns, g in zip(gigpo, grpo, strict=True))


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


@tool_path("environment_factory")
def test_the_environment_factory_recipe_gives_per_turn_advantages_when_the_model_calls_the_tool(tmp_path):
    """As in test_tool_loops.py, generate is scripted (here without the warm start): the turns are the script's."""
    example = load("environment_factory")
    from warm_start import build_tool_tokenizer

    tokenizer = build_tool_tokenizer(example.dataset(10)["prompt"], [example.GuessEnvironment.guess])
    from rllm_plugins.tiny import build_tiny_model

    trainer = example.build_trainer(build_tiny_model(tokenizer, seed=0), tokenizer, steps=1, output_dir=str(tmp_path / "out"), max_completion_length=96)
    calls = {"count": 0}

    def generate(input_ids: torch.Tensor, **_: Any) -> torch.Tensor:
        texts = []
        for row, ids in enumerate(input_ids.tolist()):
            if calls["count"] == 0 and row % 4 != 3:  # first turn: completions 0-2 of every four guess; the hidden digit, then 5, then 7
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
    assert np.diff(result.offsets).tolist() == [2, 2, 2, 1] * 4  # a guess and a closing turn; the fourth never called the tool
    assert trainer.last_reward_batch.rewards.tolist() == [1.0, 0.0, 0.0, 0.0] * 4  # found by the first guess only
    logged = next(e for e in trainer.state.log_history if "loss" in e)
    assert logged["tools/call_frequency"] == pytest.approx(12 / 16) and logged["batch/all_groups/turns/mean"] == pytest.approx(1.75)
    assert np.abs(result.values).max() > 0


@tool_path("environment_factory")  # the environment's unbound method as a tool: transformers 4 asks a type hint of self
def test_the_short_tool_template_makes_an_18_token_prompt_and_renders_calls_as_the_model_writes_them():
    """The README's claim (a prompt is 18 tokens), and a call rendered by the template is the text the warm start teaches."""
    example = load("environment_factory")
    from warm_start import build_tool_tokenizer, call_text

    prompt = example.dataset(1)["prompt"][0]
    tokenizer = build_tool_tokenizer(example.dataset(10)["prompt"], [example.GuessEnvironment.guess])
    assert (
        len(tokenizer.apply_chat_template(prompt, tools=[example.GuessEnvironment.guess], add_generation_prompt=True, tokenize=True, return_dict=False)) == 18
    )
    call = {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "guess", "arguments": {"digit": 5}}}]}
    rendered = tokenizer.apply_chat_template([*prompt, call], tools=[example.GuessEnvironment.guess], tokenize=False)
    assert rendered.endswith("<|im_start|>assistant\n" + call_text(5) + "\n")
