"""Every python snippet of docs/trl.md runs, and the single-turn rule is stated the same (and truly) on both pages.

A snippet is one of: the complete script (run by test_docs_script.py); an excerpt of an example file
(first line ``# examples/<path>``: its lines appear in that file, in order; the file runs in
test_multi_turn_examples.py); or a fragment, executed here with what the complete script defines.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
TRL_DOC = (ROOT / "docs" / "trl.md").read_text()
TURN_DOC = (ROOT / "docs" / "turn_level.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", TRL_DOC, re.S)
SCRIPT = next(b for b in BLOCKS if "trainer.train()" in b and "build_tiny_tokenizer" in b)
EXCERPT = re.compile(r"^# (examples/\S+\.py)\n")


def fragments() -> list[str]:
    return [b for b in BLOCKS if b is not SCRIPT and not EXCERPT.match(b)]


def script_setup() -> dict[str, Any]:
    """What the complete script defines before it configures its run: prompts, dataset, correct, tokenizer, model."""
    namespace: dict[str, Any] = {}
    exec(compile(SCRIPT[: SCRIPT.index("args = RLLMGRPOConfig(")], "docs/trl.md", "exec"), namespace)
    return namespace


def test_the_page_has_fragments_and_an_excerpt():
    assert len(fragments()) >= 2 and any(EXCERPT.match(b) for b in BLOCKS)


@pytest.mark.parametrize("block", [b for b in BLOCKS if EXCERPT.match(b)], ids=lambda b: EXCERPT.match(b).group(1))
def test_an_excerpt_is_the_example_file_in_order(block):
    path = ROOT / EXCERPT.match(block).group(1)
    file_lines = path.read_text().splitlines()
    position = 0
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        try:
            position = file_lines.index(line, position) + 1
        except ValueError:
            pytest.fail(f"docs/trl.md quotes a line that {path.name} does not have (after line {position}): {line!r}")


def test_the_three_line_switch_runs_as_written(tmp_path, monkeypatch):
    """``model`` is whatever the user loads by name: here a local directory holding the tiny model and its tokenizer."""
    block = next(b for b in fragments() if "was: from trl import GRPOConfig, GRPOTrainer" in b)
    namespace = script_setup()
    namespace["model"].save_pretrained(tmp_path / "tiny")
    namespace["tokenizer"].save_pretrained(tmp_path / "tiny")
    namespace["model"] = str(tmp_path / "tiny")
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "docs/trl.md", "exec"), namespace)
    trainer = namespace["trainer"]
    assert type(trainer).__name__ == "RLLMGRPOTrainer" and trainer.advantage_settings.estimator == "rloo"
    assert trainer.processing_class is not None  # loaded from the model's directory, as TRL does for a model name


def test_the_normalize_then_sum_fragment_runs_as_written(tmp_path, monkeypatch):
    block = next(b for b in fragments() if "normalize_then_sum" in b)
    namespace = script_setup()
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "docs/trl.md", "exec"), namespace)
    assert namespace["trainer"].advantage_settings.aggregation == "normalize_then_sum"


def test_every_fragment_is_run_by_a_test_here():
    covered = ("was: from trl import GRPOConfig, GRPOTrainer", "normalize_then_sum")
    assert all(any(marker in b for marker in covered) for b in fragments()), "a docs/trl.md fragment no test runs"


# ---------------------------------------------------------------- the single-turn rule


def single_turn_rule(page: str) -> str:
    found = re.search(r"\*\*Single-turn rule\*\*.*?select `grpo` for single-turn training\.", page, re.S)
    assert found, "the page does not state the single-turn rule"
    return " ".join(found.group(0).split())


def test_both_pages_state_the_same_single_turn_rule():
    assert single_turn_rule(TRL_DOC) == single_turn_rule(TURN_DOC)
    assert "a group of one scorable trajectory gets `gigpo = grpo` and `step_reinforce = 0`" in single_turn_rule(TRL_DOC)


def one_scorable(completions: list[str], **_: Any) -> list[float | None]:
    """Per group of 4: 1.0 for the first completion, None (unscorable) for the others."""
    return [1.0 if i % 4 == 0 else None for i in range(len(completions))]


def two_scorable(completions: list[str], **_: Any) -> list[float | None]:
    """Per group of 4: 1.0, 0.0, then two unscorable completions."""
    return [[1.0, 0.0, None, None][i % 4] for i in range(len(completions))]


@pytest.mark.parametrize("reward, estimator, expected", [
    # one scorable trajectory: grpo's group of one is r / (1 + eps) (mean 0, std 1); a lone step's step part is 0
    (one_scorable, "gigpo", [1 / (1 + 1e-6), 0, 0, 0]),
    (one_scorable, "step_reinforce", [0, 0, 0, 0]),
    # two scorable trajectories, rewards 1 and 0: grpo is +-0.5 / (0.5 + eps); gigpo (1 + 0.5) x that, step_reinforce that
    (two_scorable, "gigpo", [1.5 * 0.5 / (0.5 + 1e-6), -1.5 * 0.5 / (0.5 + 1e-6), 0, 0]),
    (two_scorable, "step_reinforce", [0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6), 0, 0]),
])  # fmt: skip
def test_the_single_turn_rule_holds_in_real_steps(make_trainer, reward, estimator, expected):
    kwargs = {"step_advantage_w": 0.5} if estimator == "gigpo" else {}
    trainer = make_trainer(reward_funcs=[reward], reward_weights=None, adv_estimator=estimator, adv_estimator_kwargs=kwargs, max_steps=1)
    trainer.train()
    used = trainer.records[0]["advantages"]
    assert used.shape == (8,) and used.dtype == torch.float32
    np.testing.assert_allclose(used.numpy(), expected * 2, rtol=0, atol=1e-6)
