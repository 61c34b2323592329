"""TRL's own multi-turn paths with ``adv_estimator="gigpo"``: its tool-calling loop (``tools=[...]``) and ``environment_factory``.

As TRL's own tests do (``tests/test_grpo_trainer.py::test_training_with_tools``), the model's ``generate`` is
replaced by scripted completions: a random tiny model never writes a parsable tool call. Everything else is
TRL's: the chat template with tools (TRL's Qwen2.5 template on our tiny tokenizer, so TRL's
``add_response_schema`` recognises it), parsing the calls, running the tools, appending the tool results
with ``tool_mask`` 0, the second generation, the loss and the optimizer step.

The script (one group of 4 completions of one prompt, each step):

    completion 0: multiply(a=3, b=4) -> tool result 12 -> "12"     reward 1
    completion 1: multiply(a=3, b=4) -> tool result 12 -> "Done!"  reward 0.5
    completion 2: multiply(a=3, c=4) -> tool error     -> "Done!"  reward 0.5
    completion 3: "I don't know" (no tool call: one turn)          reward 0

The expected advantages are computed by hand from the script (turns and anchor states as the script
defines them, not read from the batch), then placed on the tokens the script says each turn wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
import torch
from datasets import Dataset
from rllm_trl import RLLMGRPOConfig, RLLMGRPOTrainer
from trl.chat_template_utils import qwen2_5_chat_template

from rllm_plugins.tiny import build_tiny_model, build_tiny_tokenizer

from .conftest import Calculator, multiply, tool_path

pytest.importorskip("jmespath", reason="TRL's tool loop parses tool calls with jmespath on transformers < 5.13")

QUESTION = "What is 3 times 4?"
CALL = '<tool_call>\n{{"name": "multiply", "arguments": {{"a": 3, "{key}": 4}}}}\n</tool_call><|im_end|>'
FIRST_TURNS = [CALL.format(key="b"), CALL.format(key="b"), CALL.format(key="c"), "I don't know<|im_end|>"]
SECOND_TURNS = ["12<|im_end|>", "Done!<|im_end|>", "Done!<|im_end|>"]  # completions 0, 1, 2: those that called the tool
REWARDS = [1.0, 0.5, 0.5, 0.0]
ANCHORS = [["prompt", "result 12"], ["prompt", "result 12"], ["prompt", "tool error"], ["prompt"]]  # by the script
GAMMA, OMEGA, EPS = 0.5, 1.0, 1e-6


def answer_reward(completions: list[list[dict[str, Any]]], **_: Any) -> list[float]:
    """1 when the final answer is 12, 0.5 for "Done!", 0 otherwise."""
    finals = [messages[-1]["content"] for messages in completions]
    return [1.0 if "12" in text else 0.5 if "Done" in text else 0.0 for text in finals]


def plain_z(values: list[float]) -> list[float]:
    """Population z-scores with eps; a single value gives 0 (a lone anchor carries no step signal)."""
    if len(values) == 1:
        return [0.0]
    mean = sum(values) / len(values)
    std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
    return [(v - mean) / (std + EPS) for v in values]


def gigpo_by_hand() -> list[list[float]]:
    """GiGPO of the script: episode z-score of the rewards + omega * z-score of the discounted returns per anchor state."""
    returns = []
    for reward, anchors in zip(REWARDS, ANCHORS, strict=True):
        turns = len(anchors)  # the outcome is the last turn's reward, 0 before: G_t = gamma^(T-1-t) * R
        returns.append([GAMMA ** (turns - 1 - t) * reward for t in range(turns)])
    episode = plain_z(REWARDS)
    step = [[0.0] * len(a) for a in ANCHORS]
    for state in {s for anchors in ANCHORS for s in anchors}:
        members = [(b, t) for b, anchors in enumerate(ANCHORS) for t, s in enumerate(anchors) if s == state]
        for (b, t), z in zip(members, plain_z([returns[b][t] for b, t in members]), strict=True):
            step[b][t] = z
    return [[episode[b] + OMEGA * s for s in step[b]] for b in range(len(REWARDS))]


@pytest.fixture(scope="module")
def tool_tokenizer() -> Any:
    """Our tiny tokenizer with TRL's Qwen2.5 chat template, trained on what it will see (the prompt with the tool schema)."""
    probe = build_tiny_tokenizer([QUESTION])
    probe.chat_template = qwen2_5_chat_template
    prompt = probe.apply_chat_template([{"role": "user", "content": QUESTION}], tools=[multiply], add_generation_prompt=True, tokenize=False)
    tokenizer = build_tiny_tokenizer([prompt, *FIRST_TURNS, *SECOND_TURNS, "<tool_response>\n12\n</tool_response>"], vocab_size=512)
    tokenizer.chat_template = qwen2_5_chat_template
    return tokenizer


class RecordingTrainer(RLLMGRPOTrainer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outputs: list[dict[str, torch.Tensor]] = []

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        self.outputs.append({k: output[k].detach().clone() for k in ("completion_ids", "completion_mask", "tool_mask", "advantages")})
        return output


def scripted_generate(tokenizer: Any) -> Callable[..., torch.Tensor]:
    """A stand-in for ``model.generate``: the first call of each step gives FIRST_TURNS, the next one SECOND_TURNS."""
    calls = {"count": 0}

    def generate(input_ids: torch.Tensor, **_: Any) -> torch.Tensor:
        texts = FIRST_TURNS if calls["count"] % 2 == 0 else SECOND_TURNS
        calls["count"] += 1
        assert input_ids.shape[0] == len(texts), f"generation {calls['count']}: {input_ids.shape[0]} rows, the script has {len(texts)}"
        ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
        width = max(map(len, ids))
        padded = torch.tensor([row + [tokenizer.pad_token_id] * (width - len(row)) for row in ids], device=input_ids.device)
        return torch.cat([input_ids, padded], dim=-1)

    return generate


@pytest.fixture
def tool_trainer(tool_tokenizer: Any, tmp_path: Path, make_config: Callable[..., Any]) -> Callable[..., RecordingTrainer]:
    def make(**trainer_kwargs: Any) -> RecordingTrainer:
        args = make_config(
            tmp_path,
            RLLMGRPOConfig,
            reward_weights=None,
            per_device_train_batch_size=4,
            num_generations=4,
            max_completion_length=160,  # the tool error message is long
            adv_estimator="gigpo",
            adv_estimator_kwargs={"gamma": GAMMA, "step_advantage_w": OMEGA},
        )
        return RecordingTrainer(
            model=build_tiny_model(tool_tokenizer, seed=0),
            reward_funcs=[answer_reward],
            args=args,
            train_dataset=Dataset.from_dict({"prompt": [[{"role": "user", "content": QUESTION}]] * 2}),
            processing_class=tool_tokenizer,
            **trainer_kwargs,
        )

    return make


@pytest.mark.parametrize("path", [pytest.param(path, marks=tool_path(path)) for path in ("tools", "environment_factory")])
def test_trls_tool_loop_gives_per_turn_advantages_on_the_model_tokens(tool_trainer, tool_tokenizer, snapshot, path):
    trainer = tool_trainer(tools=[multiply]) if path == "tools" else tool_trainer(environment_factory=Calculator)
    before = snapshot(trainer.model)
    with patch.object(trainer.model, "generate", side_effect=scripted_generate(tool_tokenizer)):
        trainer.train()
    after = snapshot(trainer.model)
    assert any(not torch.equal(before[n], after[n]) for n in before), "no parameter changed"
    logged = next(e for e in trainer.state.log_history if "loss" in e)
    assert logged["tools/call_frequency"] == pytest.approx(3 / 4) and logged["tools/failure_frequency"] == pytest.approx(1 / 3)

    expected_turns = gigpo_by_hand()
    assert expected_turns[0][1] != expected_turns[1][1], "the script gives the two completions of one anchor the same number"
    first = [tool_tokenizer(t, add_special_tokens=False)["input_ids"] for t in FIRST_TURNS]
    second = [tool_tokenizer(t, add_special_tokens=False)["input_ids"] for t in SECOND_TURNS]
    assert len(trainer.outputs) == 2
    for record in trainer.outputs:
        ids, mask, tool_mask, used = (record[k] for k in ("completion_ids", "completion_mask", "tool_mask", "advantages"))
        assert used.shape == ids.shape and used.dtype == torch.float32  # (B, T): one advantage per token
        for b in range(4):
            length = int(mask[b].sum())
            row = ids[b, :length].tolist()
            assert row[: len(first[b])] == first[b]  # turn 0: what the model wrote first
            expected = [expected_turns[b][0]] * len(first[b])
            expected_tool_mask = [1] * len(first[b])
            if b < 3:  # the tool result (TRL's chat-template suffix) with tool_mask 0, then turn 1
                assert row[length - len(second[b]) :] == second[b]
                tool_tokens = length - len(first[b]) - len(second[b])
                assert tool_tokens > 0
                expected += [0.0] * tool_tokens + [expected_turns[b][1]] * len(second[b])
                expected_tool_mask += [0] * tool_tokens + [1] * len(second[b])
            assert length == len(expected)
            assert tool_mask[b, :length].tolist() == expected_tool_mask
            assert used[b, :length].tolist() == pytest.approx(expected, abs=1e-5)
            assert (used[b, length:] == 0).all()  # padding
    # completions 0 and 1 met at the tool result "12"; completion 2's error text is an anchor of its own
    assert logged["batch/all_groups/anchor_groups/mean_size"] == pytest.approx(7 / 3)  # 7 turns in 3 anchor groups
    assert logged["turn/1/advantage_mean"] == pytest.approx(sum(expected_turns[b][1] for b in range(3)) / 3, abs=1e-5)
