"""What an agent loop returns, checked against verl's contract (docs/agent_loops.md) before it becomes rows.

``AgentLoopBase.run`` returns one ``AgentLoopOutput`` (a rollout: one row), or on verl's v1 trainer a list of
them (a session: one row per output, keyed ``{uid}_{session_id}_{index}``; ``[]`` gives no row). In each output
``response_ids`` holds the model's tokens and the tool or environment tokens after ``prompt_ids``;
``response_mask`` has one 0/1 per response token, 1 exactly on the model's tokens. Every check here names the
rollout (prompt and session), the output and, for the mask, the model turn; nothing is repaired.

:func:`model_spans` finds the model's replies in a row from the calls the loop made to the rollout server: a
reply sits right after the context the loop sent with it, when that context is a prefix of the row's tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Call", "mask_errors", "model_spans", "output_errors", "session_outputs"]


@dataclass(frozen=True)
class Call:
    """One ``generate`` call of a rollout: the context the loop sent (``prompt_ids``) and the model's reply (``token_ids``, from
    the text ``reply``)."""

    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    reply: str = ""


def session_outputs(returned: Any, where: str, use_v1: bool) -> tuple[list[Any], list[str], list[str]]:
    """The outputs of one rollout as a list, the errors that keep verl from taking them, and warnings.

    A single ``AgentLoopOutput`` is one output; a list is a session, which only verl's v1 trainer takes
    (``trainer.use_v1=true``, from verl 0.9 on); ``[]`` is dropped there with a warning in verl's log.
    """
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

    if isinstance(returned, AgentLoopOutput):
        return [returned], [], []
    if not isinstance(returned, list):
        return [], [f"{where}: run() returned {type(returned).__name__}, not an AgentLoopOutput or a list of them"], []
    wrong = [f"{i} ({type(o).__name__})" for i, o in enumerate(returned) if not isinstance(o, AgentLoopOutput)]
    if wrong:
        return [], [f"{where}: run() returned a list whose items {', '.join(wrong)} are not AgentLoopOutput"], []
    if not use_v1:
        from rllm_verl.versions import verl_features

        features = verl_features()
        if features.v1_trainer:
            trainer, fix = "verl's legacy trainer (trainer.use_v1=false)", "train with trainer.use_v1=true"
        else:  # the legacy trainer is the only one there
            trainer, fix = f"verl {features.version}'s trainer (it has no v1 trainer)", "upgrade to verl>=0.9.1 and train with trainer.use_v1=true"
        return (
            [],
            [
                f"{where}: run() returned a list of {len(returned)} output(s) (a session); {trainer} "
                f"takes one AgentLoopOutput per rollout and fails on a list: return one output, or {fix}"
            ],
            [],
        )
    if not returned:
        return [], [], [f"{where}: run() returned [] (no output): verl's v1 trainer gives this rollout no row ('Empty output' in its log)"]
    return list(returned), [], []


def output_errors(output: Any, where: str, *, vocab_size: int, response_length: int, prompt_length: int | None) -> list[str]:
    """What is wrong with one output's ids and lengths: the mask's length and values, ids outside the vocabulary, lengths past
    ``actor_rollout_ref.rollout.response_length`` (and ``prompt_length`` when given: the legacy trainer pads to both)."""
    errors = []
    prompt, response, mask = list(output.prompt_ids), list(output.response_ids), list(output.response_mask)
    if not prompt:
        errors.append(f"{where}: prompt_ids is empty; it holds the prompt's tokens as the model saw them")
    if len(mask) != len(response):
        errors.append(f"{where}: response_mask has {len(mask)} entries but response_ids {len(response)}; give one 0/1 per response token")
    odd = sorted({m for m in mask if m not in (0, 1)})
    if odd:
        errors.append(f"{where}: response_mask holds {odd}; it takes 1 on the model's tokens and 0 on tool or environment tokens")
    if output.response_logprobs is not None and len(output.response_logprobs) != len(response):
        errors.append(f"{where}: response_logprobs has {len(output.response_logprobs)} entries but response_ids {len(response)}")
    for name, ids in (("prompt_ids", prompt), ("response_ids", response)):
        bad = [(i, t) for i, t in enumerate(ids) if not 0 <= t < vocab_size]
        if bad:
            errors.append(f"{where}: {name}[{bad[0][0]}] = {bad[0][1]} is no token id of the tokenizer (0..{vocab_size - 1}); {len(bad)} such")
    if len(response) > response_length:
        errors.append(
            f"{where}: response_ids has {len(response)} tokens, more than actor_rollout_ref.rollout.response_length={response_length}; "
            "truncate response_ids and response_mask to it, as verl's own loops do"
        )
    if prompt_length is not None and len(prompt) > prompt_length:
        errors.append(
            f"{where}: prompt_ids has {len(prompt)} tokens, more than actor_rollout_ref.rollout.prompt_length={prompt_length}, "
            "to which verl's legacy trainer pads the prompts"
        )
    return errors


def model_spans(prompt_ids: Sequence[int], response_ids: Sequence[int], calls: Sequence[Call]) -> list[tuple[int, int, int]]:
    """``(turn, start, end)`` of each model reply found in this row's response: call ``turn``'s reply sits at ``start``
    when the context sent with it is a prefix of ``prompt_ids + response_ids`` ending at the response's ``start``."""
    tokens = [*prompt_ids, *response_ids]
    spans = []
    for turn, call in enumerate(calls):
        start = len(call.prompt_ids) - len(prompt_ids)
        end = start + len(call.token_ids)
        sent_as_prefix = tuple(tokens[: len(call.prompt_ids)]) == call.prompt_ids
        if call.token_ids and start >= 0 and end <= len(response_ids) and sent_as_prefix and tuple(response_ids[start:end]) == call.token_ids:
            spans.append((turn, start, end))
    return spans


def mask_errors(output: Any, calls: Sequence[Call], where: str, decode: Callable[[list[int]], str]) -> tuple[list[str], list[str]]:
    """Mask semantics of one output: errors for a model turn whose tokens are all 0 and for 1s on tokens the model did not
    write (tool or environment results); a warning when none of the model's replies can be found in the row."""
    response, mask = list(output.response_ids), list(output.response_mask)
    if len(mask) != len(response):
        return [], []  # output_errors names it
    spans = model_spans(output.prompt_ids, response, calls)
    if not spans:
        if not calls and any(m == 1 for m in mask):
            return [], [f"{where}: the loop never called the rollout server, yet response_mask marks model tokens; response_mask not checked"]
        if any(m == 1 for m in mask):
            return [], [f"{where}: none of the model's replies appears verbatim after the context it was sent with; response_mask not checked"]
        return [], []
    errors = []
    for turn, start, end in spans:
        if not any(m == 1 for m in mask[start:end]):
            errors.append(
                f"{where}: response_mask is 0 on all of turn {turn}'s model tokens (response positions {start}..{end - 1}, "
                f"{decode(response[start:end])!r}); the model's tokens must be 1"
            )
    model = {t for _, start, end in spans for t in range(start, end)}
    outside = [t for t, m in enumerate(mask) if m == 1 and t not in model]
    if outside:
        first = [outside[0]]
        while len(first) < len(outside) and outside[len(first)] == first[-1] + 1:
            first.append(outside[len(first)])
        before = [turn for turn, start, _ in spans if start <= first[0]]
        after = f"after turn {before[-1]}" if before else "before turn 0"
        errors.append(
            f"{where}: response_mask is 1 on {len(outside)} tokens the model did not write (first at response positions {first[0]}..{first[-1]}, "
            f"{after}: {decode([response[t] for t in first])!r}); tool and environment tokens must be 0"
        )
    return errors, []
