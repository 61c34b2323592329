"""An inverted ``env_mask`` is told from a correct one whichever side speaks first, on rows TRL's own tool loop built.

The rows: one real step of TRL's tool loop (``tools=[multiply]``) and of ``environment_factory``, generation scripted
as in ``test_tool_loops.py`` (every completion calls the tool, then answers), recorded as TRL's ``_generate`` returns
them: ``completion_ids`` and ``tool_mask``. A ``rollout_func`` then returns them in four ways:

- model first: the completions as TRL built them (model turn, tool result, model turn);
- environment first: the first model turn moved into the prompt, so each completion opens with the tool result;

each with the mask TRL built (correct) and with ``1 - mask`` (inverted), and with ``logprobs`` 0.0 everywhere (no
log-probability signal) or the model's log-probabilities on its tokens and 0.0 on the tool's (as TRL's loop writes them).
Expected: a warning exactly for the inverted masks. Who speaks first cannot tell them apart: a correct
environment-first mask is 0 on every completion's first token, as an inverted model-first one is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any
from unittest.mock import patch

import pytest
import torch
from datasets import Dataset
from rllm_trl import RLLMGRPOConfig, RLLMGRPOTrainer
from rllm_trl.rollouts import checked_rollout_func
from trl import GRPOConfig, GRPOTrainer
from trl.chat_template_utils import qwen2_5_chat_template

from rllm_plugins.tiny import build_tiny_model, build_tiny_tokenizer

from .conftest import Calculator, multiply, tool_path

pytest.importorskip("jmespath", reason="TRL's tool loop parses tool calls with jmespath on transformers < 5.13")

QUESTION = "What is 3 times 4?"
CALL = '<tool_call>\n{{"name": "multiply", "arguments": {{"a": {a}, "b": 4}}}}\n</tool_call><|im_end|>'
FIRST_TURNS = [CALL.format(a=a) for a in (3, 3, 2, 5)]
SECOND_TURNS = ["12<|im_end|>", "Done!<|im_end|>", "8<|im_end|>", "20<|im_end|>"]
WARNING = "env_mask looks inverted"


def answer_reward(completions: list[Any], **_: Any) -> list[float]:
    return [float(len(str(c))) for c in completions]


@pytest.fixture(scope="module")
def tool_tokenizer() -> Any:
    probe = build_tiny_tokenizer([QUESTION])
    probe.chat_template = qwen2_5_chat_template
    prompt = probe.apply_chat_template([{"role": "user", "content": QUESTION}], tools=[multiply], add_generation_prompt=True, tokenize=False)
    tokenizer = build_tiny_tokenizer([prompt, *FIRST_TURNS, *SECOND_TURNS, "<tool_response>\n12\n</tool_response>"], vocab_size=512)
    tokenizer.chat_template = qwen2_5_chat_template
    return tokenizer


def scripted_generate(tokenizer: Any) -> Callable[..., torch.Tensor]:
    """``model.generate``: FIRST_TURNS on the first call of a step, SECOND_TURNS after the tool ran."""
    calls = {"count": 0}

    def generate(input_ids: torch.Tensor, **_: Any) -> torch.Tensor:
        texts = FIRST_TURNS if calls["count"] % 2 == 0 else SECOND_TURNS
        calls["count"] += 1
        ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
        width = max(map(len, ids))
        padded = torch.tensor([row + [tokenizer.pad_token_id] * (width - len(row)) for row in ids])
        return torch.cat([input_ids, padded], dim=-1)

    return generate


class RowRecorder(GRPOTrainer):
    """TRL's own trainer, keeping what its ``_generate`` built: prompt ids, completion ids, tool_mask."""

    rows: list[tuple[list[int], list[int], list[int]]]

    def _generate(self, prompts: list[Any]) -> Any:
        result = super()._generate(prompts)
        prompt_ids, completion_ids, tool_mask = result[:3]
        self.rows = [(list(p), list(c), list(m)) for p, c, m in zip(prompt_ids, completion_ids, tool_mask, strict=True)]
        return result


@pytest.fixture(scope="module", params=[pytest.param(path, marks=tool_path(path)) for path in ("tools", "environment_factory")])
def trl_rows(
    request: pytest.FixtureRequest, tool_tokenizer: Any, tmp_path_factory: pytest.TempPathFactory, make_config: Callable[..., Any]
) -> tuple[RowRecorder, list[Any]]:
    """The rows of one real step of TRL's tool loop (or environment_factory), and the trainer that built them."""
    args = make_config(tmp_path_factory.mktemp("rows"), GRPOConfig, reward_weights=None, per_device_train_batch_size=4, max_completion_length=160, max_steps=1)
    path = {"tools": [multiply]} if request.param == "tools" else {"environment_factory": Calculator}
    trainer = RowRecorder(
        model=build_tiny_model(tool_tokenizer, seed=0),
        reward_funcs=[answer_reward],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": [[{"role": "user", "content": QUESTION}]] * 4}),
        processing_class=tool_tokenizer,
        **path,
    )
    with patch.object(trainer.model, "generate", side_effect=scripted_generate(tool_tokenizer)):
        trainer.train()
    assert all(0 in mask and mask[0] == 1 for _, _, mask in trainer.rows), "every completion: the model's turn, the tool result, the model's turn"
    return trainer, trainer.rows


def model_logprobs(model: Any, prompt: list[int], completion: list[int], mask: list[int]) -> list[float]:
    """The model's log-probability of each of its tokens, 0.0 on the tool's (what TRL's tool loop writes)."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0].float()
    logp = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return [float(logp[t, token]) if m else 0.0 for t, (token, m) in enumerate(zip(completion, mask, strict=True))]


def rollout_output(model: Any, rows: list[Any], order: str, inverted: bool, logprobs: str) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": []}
    for prompt, completion, mask in rows:
        if order == "environment first":  # the first model turn joins the prompt: the tool result opens the completion
            cut = mask.index(0)
            prompt, completion, mask = prompt + completion[:cut], completion[cut:], mask[cut:]
        out["prompt_ids"].append(prompt)
        out["completion_ids"].append(completion)
        out["logprobs"].append(model_logprobs(model, prompt, completion, mask) if logprobs == "the model's" else [0.0] * len(completion))
        out["env_mask"].append([1 - m for m in mask] if inverted else mask)
    return out


@pytest.mark.parametrize("logprobs", ["0.0 everywhere", "the model's"])
@pytest.mark.parametrize("inverted", [False, True], ids=["correct", "inverted"])
@pytest.mark.parametrize("order", ["model first", "environment first"])
def test_an_inverted_mask_is_warned_about_and_a_correct_one_is_not_whoever_speaks_first(trl_rows, caplog, order, inverted, logprobs):
    trainer, rows = trl_rows
    output = rollout_output(trainer.model, rows, order, inverted, logprobs)
    first_tokens = {mask[0] for mask in output["env_mask"]}
    assert len(first_tokens) == 1, "every completion opens with the same side"
    rollout = checked_rollout_func(lambda prompts, trainer: output, step_level=True)
    with caplog.at_level(logging.WARNING, logger="rllm_trl.rollouts"):
        # the rows come from TRL's tool loop; handed back by a rollout_func, they go to a trainer without tools (with
        # tools, TRL would run its loop again and an env_mask is refused), ending turns at the same tokens
        assert rollout(["p"] * len(rows), SimpleNamespace(tools=None, eos_token_ids=trainer.eos_token_ids)) is output
    warnings = [r.getMessage() for r in caplog.records if WARNING in r.getMessage()]
    assert len(warnings) == int(inverted), warnings
    if inverted:
        assert "end at the end-of-turn token" in warnings[0] and "[1 - m for m in mask]" in warnings[0]
        assert ("the non-zero logprobs" in warnings[0]) == (logprobs == "the model's")


def test_the_trainer_warns_once_on_an_inverted_environment_first_mask_and_trains(trl_rows, tool_tokenizer, tmp_path, caplog, make_config):
    """The mixin's wrapper, in real steps of RLLMGRPOTrainer with gigpo: one warning over two steps."""
    recorder, rows = trl_rows
    output = rollout_output(recorder.model, rows, "environment first", True, "0.0 everywhere")
    args = make_config(tmp_path, RLLMGRPOConfig, reward_weights=None, per_device_train_batch_size=4, max_completion_length=160, adv_estimator="gigpo")
    trainer = RLLMGRPOTrainer(
        model=build_tiny_model(tool_tokenizer, seed=0),
        reward_funcs=[answer_reward],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["go"] * 8}),
        processing_class=tool_tokenizer,
        rollout_func=lambda prompts, trainer: {key: list(value) for key, value in output.items()},
    )
    with caplog.at_level(logging.WARNING, logger="rllm_trl.rollouts"):
        trainer.train()
    assert len([r for r in caplog.records if WARNING in r.getMessage()]) == 1


@pytest.mark.parametrize(
    "masks, ids, logprobs, inverted",
    [
        ([[0, 1, 1, 0]], [[9, 5, 3, 8]], [[0.0, -1.0, -2.0, 0.0]], False),  # sampled where 1, the model's run ends at 3: as documented
        ([[1, 0, 0, 1]], [[9, 5, 3, 8]], [[0.0, -1.0, -2.0, 0.0]], True),  # both signals: inverted
        ([[1, 0, 0, 1]], [[9, 5, 3, 8]], [[-0.5, -1.0, -2.0, -0.5]], True),  # logprobs everywhere say nothing; the turn end does
        ([[1, 0, 0, 1]], [[9, 5, 3, 8]], [[-0.5, 0.0, 0.0, -0.5]], False),  # the signals disagree: nothing is said
        ([[1, 0, 1]], [[9, 5, 8]], [[0.0, 0.0, 0.0]], False),  # no end-of-turn token, no sampled logprob: no verdict
        ([[1, 0, 1]], [[9, 5, 8]], [[float("nan"), -1.0, None]], True),  # NaN and None (TRL's unknown) say nothing
        ([[0, 1]], [[5, 8]], None, False),  # no logprobs, no turn end: no verdict
    ],
)
def test_the_two_signals_and_their_combination(masks, ids, logprobs, inverted):
    from rllm_trl.rollouts import mask_evidence

    assert mask_evidence(masks, ids, logprobs, end_of_turn=[3]).inverted is inverted
