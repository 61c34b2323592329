"""Run an agent loop as verl's ``AgentLoopWorker`` runs it, on one event loop, and collect what each rollout returns.

verl builds one agent-loop object per rollout with Hydra, inside the worker's running event loop (verl's
``AgentLoopBase`` keeps the loop it was built in and runs its tokenizer calls there), and awaits ``run``.
:func:`run_rollouts` does the same in one ``asyncio.run`` for the whole rehearsal, the rollouts one after the
other (so the scripted replies drawn for each are the same from run to run). Each rollout's return is checked
(:mod:`rllm_verl.tools.loop_outputs`) and, when the loop left ``reward_score`` None, scored (:class:`Scorer`).
A loop that raises, or builds an invalid ``AgentLoopOutput``, is reported with the rollout and where it raised.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rllm_verl.tools.loop_outputs import Call, mask_errors, output_errors, session_outputs
from rllm_verl.tools.stand_ins import Scorer, ScriptedServer

__all__ = ["Rollout", "RolloutResults", "run_rollouts", "validation_message"]

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": False}


@dataclass
class Rollout:
    """One rollout: its prompt (``group``), its place among the prompt's ``rollout.n`` (``session``), its outputs and model calls."""

    group: int
    session: int
    outputs: list[Any]
    calls: list[Call]


@dataclass
class RolloutResults:
    """Every rollout, and what is wrong (``errors``) or worth knowing (``warnings``) about what the loop returned."""

    rollouts: list[Rollout] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def validation_message(error: Any) -> str:
    """A pydantic ``ValidationError`` as one line: each field path, what is wrong, and the value given."""
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item.get("loc", ())) or "(the whole value)"
        given = "" if item.get("type") == "missing" else f", got {item.get('input')!r}"
        parts.append(f"{where}: {item.get('msg')}{given}")
    return f"{error.title} is invalid: {'; '.join(parts)}"


def _raised_at(error: BaseException) -> str:
    """``file:line`` of the innermost frame of ``error``'s traceback outside pydantic, asyncio and rllm_verl."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not any(s in f.filename for s in ("pydantic", "asyncio", "rllm_verl"))]
    return f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def run_rollouts(
    build: Callable[[], Any],
    prompts: Sequence[str],
    group_size: int,
    *,
    server: ScriptedServer,
    scorer: Scorer,
    ground_truth: str,
    loop_name: str,
    use_v1: bool,
    limits: dict[str, Any],
) -> RolloutResults:
    """Run ``group_size`` rollouts per prompt of the loop ``build`` makes (called inside the event loop, once per rollout).

    ``limits`` holds ``vocab_size``, ``response_length`` and ``prompt_length`` (None on the v1 trainer) for
    :func:`~rllm_verl.tools.loop_outputs.output_errors`; ``decode`` turns token ids into text for the messages.
    """
    import pydantic

    results = RolloutResults()

    async def one(group: int, session: int, prompt: str) -> None:
        where = f"agent loop {loop_name!r}, prompt {group}, rollout {session}"
        kwargs: dict[str, Any] = {
            "raw_prompt": [{"role": "user", "content": prompt}],
            "data_source": "rehearse",
            "reward_model": {"style": "rule", "ground_truth": ground_truth},
            "extra_info": {"index": group},
            "index": group,
            "tools_kwargs": {},
            "uid": f"prompt{group}",
        }
        if use_v1:
            kwargs.update(session_id=session, global_steps=0)
        server.calls = []
        try:
            returned = await build().run(dict(SAMPLING), **kwargs)
        except pydantic.ValidationError as error:
            results.errors.append(f"{where}: its {validation_message(error)}{_raised_at(error)}")
            return
        except Exception as error:
            results.errors.append(f"{where}: run() raised {type(error).__name__}: {error}{_raised_at(error)}")
            return
        outputs, errors, warnings = session_outputs(returned, where, use_v1)
        results.warnings.extend(warnings)
        listed = isinstance(returned, list)
        decode = limits["decode"]
        for i, output in enumerate(outputs):
            at = f"{where}, output {i}" if listed else where
            errors += output_errors(
                output, at, vocab_size=limits["vocab_size"], response_length=limits["response_length"], prompt_length=limits["prompt_length"]
            )
            mask_problems, mask_warnings = mask_errors(output, server.calls, at, decode)
            errors += mask_problems
            results.warnings.extend(mask_warnings)
        if errors:
            results.errors.extend(errors)
            return
        if outputs:
            try:
                await scorer.score(outputs, kwargs)
            except Exception as error:
                results.errors.append(f"{where}: the reward function ({scorer.described}) raised {type(error).__name__}: {error}{_raised_at(error)}")
                return
            for output in outputs[:-1]:  # as verl's v1 worker: every output of a session carries the session's score
                output.reward_score = outputs[-1].reward_score
        results.rollouts.append(Rollout(group, session, outputs, list(server.calls)))

    async def every() -> None:
        for group, prompt in enumerate(prompts):
            for session in range(group_size):
                await one(group, session, prompt)

    asyncio.run(every())
    return results
