"""A short supervised warm start that teaches the tiny random model to call the game's tool, so TRL's tool loop shows turns.

A randomly initialised model never writes a parsable tool call: its episodes are one turn, every reward 0
and every advantage 0. A real chat model has learnt the format; the tiny model is taught it here, before
reinforcement learning starts, by supervised steps on scripted games: each game renders the prompt,
then up to :data:`game.MAX_TURNS` calls ``guess`` with a random digit, the game's answer as the tool
result, and ``done`` after ``=`` or the last guess. The loss is on the model's tokens only (the calls and
``done``); the sequences are built as TRL's tool loop builds them (prompt, generated tokens, the chat
template's tool-result suffix), so the model learns exactly the tokens it will see. The digits are
random, so the warm-started model guesses at random and GRPO has something to improve.

The tokenizer's chat template is a short one in Qwen2.5's format (calls in ``<tool_call>`` tags, results in
``<tool_response>`` tags, so TRL's Qwen parser reads the calls) whose system line names the tools
instead of Qwen2.5's tool preamble (instructions and each tool's JSON schema): an 18-token prompt keeps the warm start and each step cheap.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import torch
from game import MAX_TURNS, answer
from transformers import PreTrainedTokenizerFast
from trl.chat_template_utils import add_response_schema, qwen2_5_chat_template

from rllm_plugins.tiny import build_tiny_model, build_tiny_tokenizer

__all__ = ["SHORT_TOOL_TEMPLATE", "build_tool_tokenizer", "call_text", "scripted_games", "warm_start", "warm_tiny_model"]

SHORT_TOOL_TEMPLATE = (
    "{% if tools %}<|im_start|>system\ntools:{% for tool in tools %} {{ (tool.function or tool).name }}{% endfor %}<|im_end|>\n{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ message.role }}\n{{ message.content or '' }}"
    "{% for call in message.tool_calls or [] %}<tool_call>\n"
    '{"name": "{{ (call.function or call).name }}", "arguments": {{ (call.function or call).arguments | tojson }}}\n</tool_call>'
    "{% endfor %}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
DONE = "done<|im_end|>"  # the model's last turn after ``=`` or its last guess


def call_text(digit: int) -> str:
    """What the model writes to call ``guess`` (Qwen2.5's format), its end-of-turn token included."""
    return f'<tool_call>\n{{"name": "guess", "arguments": {{"digit": {digit}}}}}\n</tool_call><|im_end|>'


def build_tool_tokenizer(prompts: list[list[dict[str, str]]], tools: list[Callable[..., Any]]) -> PreTrainedTokenizerFast:
    """A tiny BPE tokenizer with :data:`SHORT_TOOL_TEMPLATE`, trained on the prompts as it renders them, the calls and the results.

    TRL's parser for Qwen2.5's format is set on it (a response template or schema, whichever the installed transformers reads).
    """
    probe = build_tiny_tokenizer(["probe"])
    probe.chat_template = SHORT_TOOL_TEMPLATE
    rendered = [probe.apply_chat_template(p, tools=tools, add_generation_prompt=True, tokenize=False) for p in prompts]
    results = [f"\n<|im_start|>user\n<tool_response>\n{reply}\n</tool_response><|im_end|>\n<|im_start|>assistant\n{DONE}" for reply in "<>="]
    tokenizer = build_tiny_tokenizer([*rendered, *(call_text(d) for d in range(10)), *results])
    tokenizer.chat_template = qwen2_5_chat_template  # TRL picks its parser by the template: Qwen2.5's ...
    add_response_schema(tokenizer)
    tokenizer.chat_template = SHORT_TOOL_TEMPLATE  # ... and the short template writes calls and results the same way
    return tokenizer


def _ids(tokenizer: PreTrainedTokenizerFast, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _result_suffix(tokenizer: PreTrainedTokenizerFast, reply: str) -> str:
    """The text TRL appends after a call: the chat template's rendering of the tool result, as TRL's tool loop takes it."""
    call = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "guess", "arguments": {}}}]},
    ]
    before = tokenizer.apply_chat_template(call, tokenize=False)
    after = tokenizer.apply_chat_template([*call, {"role": "tool", "name": "guess", "content": reply}], add_generation_prompt=True, tokenize=False)
    before = before[: before.rindex("<|im_end|>") + len("<|im_end|>")]
    return after[len(before) :]


def scripted_games(
    tokenizer: PreTrainedTokenizerFast,
    prompts: list[list[dict[str, str]]],
    tools: list[Callable[..., Any]],
    hidden: Callable[[str], int],
    count: int,
    seed: int,
) -> list[tuple[list[int], list[int]]]:
    """``count`` games of random guesses, cycling through ``prompts``: ``(token ids, loss mask)``, the mask 1 on the model's tokens.

    ``hidden(prompt text)`` is the digit a prompt's game hides; the results are the game's answers to the guesses.
    """
    rng = random.Random(seed)
    games = []
    for k in range(count):
        prompt = prompts[k % len(prompts)]
        ids = _ids(tokenizer, tokenizer.apply_chat_template(prompt, tools=tools, add_generation_prompt=True, tokenize=False))
        mask = [0] * len(ids)
        for _ in range(MAX_TURNS):
            digit = rng.randrange(10)
            reply = answer(str(digit), hidden(prompt[-1]["content"]))
            written, suffix = _ids(tokenizer, call_text(digit)), _ids(tokenizer, _result_suffix(tokenizer, reply))
            ids, mask = ids + written + suffix, mask + [1] * len(written) + [0] * len(suffix)
            if reply == "=":
                break
        done = _ids(tokenizer, DONE)
        games.append((ids + done, mask + [1] * len(done)))
    return games


def warm_start(
    model: Any, games: list[tuple[list[int], list[int]]], steps: int, batch_size: int = 8, learning_rate: float = 1e-2, seed: int = 0
) -> tuple[float, float]:
    """``steps`` AdamW steps of next-token cross-entropy on the model's tokens of random batches of ``games``; ``(first, last)`` loss.

    The loss cannot go below the entropy of the random digits (about 0.08 per token here).
    """
    width = max(len(ids) for ids, _ in games)
    pad = model.config.pad_token_id
    ids = torch.tensor([g + [pad] * (width - len(g)) for g, _ in games])
    mask = torch.tensor([m + [0] * (width - len(m)) for _, m in games], dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    model.train()
    losses = []
    for _ in range(steps):
        rows = torch.randint(0, len(games), (batch_size,), generator=generator)
        logprobs = torch.log_softmax(model(ids[rows]).logits[:, :-1].float(), dim=-1).gather(-1, ids[rows][:, 1:, None])[..., 0]
        weights = mask[rows][:, 1:]  # token t+1 is predicted at t
        loss = -(logprobs * weights).sum() / weights.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses[0], losses[-1]


def warm_tiny_model(prompts: list[list[dict[str, str]]], tools: list[Callable[..., Any]], hidden: Callable[[str], int], steps: int) -> tuple[Any, Any]:
    """The tiny tokenizer and model (seed 0), the model warm-started on 64 scripted games; prints the loss before and after."""
    tokenizer = build_tool_tokenizer(prompts, tools)
    model = build_tiny_model(tokenizer, seed=0)
    games = scripted_games(tokenizer, prompts, tools, hidden, count=64, seed=0)
    first, last = warm_start(model, games, steps)
    print(f"warm start: {steps} supervised steps on {len(games)} scripted games of random guesses, loss {first:.3f} -> {last:.3f}")
    return tokenizer, model
