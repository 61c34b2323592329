"""Rehearse your verl agent loop on a CPU: turns per row, anchor states and per-turn advantages, before a GPU run.

:func:`rehearse` composes verl's config with the launch overrides, resolves the agent loop as verl's
rollout workers do (:mod:`rllm_verl.tools.agent_loop`), builds it with Hydra from its ``_target_`` and
the arguments verl gives it, and runs it against a scripted stand-in for the rollout server: each
model turn is one of ``replies``, drawn at random (``seed``). Each prompt is run
``actor_rollout_ref.rollout.n`` times (one group). The outputs are padded as verl's agent loop pads them
and put into one ``DataProto`` by verl's own ``AgentLoopWorker._postprocess`` (the score on the last
response token, ``extra_fields`` such as ``anchor_states`` in ``non_tensor_batch``), then verl's
``compute_advantage`` runs the configured ``algorithm.adv_estimator`` on it, as the legacy trainer calls it.
``rllm-plugins verl-rehearse OVERRIDES... --prompt TEXT`` calls :func:`main`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["RehearsedRow", "Rehearsal", "main", "rehearse"]

AGENT = "actor_rollout_ref.rollout.agent"


@dataclass
class RehearsedRow:
    """One rollout: its group (prompt index), score, and per model turn the anchor state and the advantage at its first token."""

    group: int
    reward: float
    anchors: list[str]
    advantages: list[float]

    @property
    def turns(self) -> int:
        return len(self.advantages)


@dataclass
class Rehearsal:
    """What :func:`rehearse` ran and got: the agent loop, the estimator, one :class:`RehearsedRow` per rollout."""

    agent_loop: str
    target: str
    adv_estimator: str
    group_size: int
    replies: list[str]
    seed: int
    rows: list[RehearsedRow] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def __str__(self) -> str:
        head = [
            f"agent loop {self.agent_loop!r} ({self.target}) against a scripted server (replies {', '.join(map(repr, self.replies))}, seed {self.seed})",
            f"{len(self.rows) // self.group_size} prompt(s) x {self.group_size} rollouts; {self.adv_estimator} through verl's compute_advantage",
            "row  group  reward  turns  anchor state -> advantage, per turn",
        ]
        body = [
            f"{i:>3}  {row.group:>5}  {row.reward:>6.3f}  {row.turns:>5}  "
            + " | ".join(f"{anchor} -> {advantage:+.4f}" for anchor, advantage in zip(row.anchors, row.advantages, strict=True))
            for i, row in enumerate(self.rows)
        ]
        turns = [row.turns for row in self.rows]
        tail = f"turns per row: min {min(turns)}, max {max(turns)}" + (
            "; every row has one turn: a step-level estimator only rescales an outcome-level one" if max(turns) == 1 else ""
        )
        return "\n".join([*head, *body, tail])


class ScriptedServer:
    """A stand-in for verl's rollout server: each ``generate`` answers with one of ``replies`` (tokenized), drawn by ``rng``."""

    def __init__(self, tokenizer: Any, replies: Sequence[str], rng: random.Random) -> None:
        self.tokenizer, self.replies, self.rng = tokenizer, list(replies), rng

    async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        return TokenOutput(token_ids=self.tokenizer.encode(self.rng.choice(self.replies), add_special_tokens=False))


def _batch(outputs: list[Any], tokenizer: Any) -> Any:
    """The ``DataProto`` verl's ``AgentLoopWorker._postprocess`` builds from these outputs (padded here as verl pads them)."""
    from types import SimpleNamespace

    import torch
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, _InternalAgentLoopOutput

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    prompt_width = max(len(o.prompt_ids) for o in outputs)
    response_width = max(len(o.response_ids) for o in outputs)
    padded = []
    for o in outputs:
        left, right = prompt_width - len(o.prompt_ids), response_width - len(o.response_ids)
        prompt = torch.tensor([[pad] * left + list(o.prompt_ids)])
        response = torch.tensor([list(o.response_ids) + [pad] * right])
        attention = torch.tensor([[0] * left + [1] * (len(o.prompt_ids) + len(o.response_ids)) + [0] * right])
        padded.append(
            _InternalAgentLoopOutput(
                prompt_ids=prompt,
                response_ids=response,
                input_ids=torch.cat([prompt, response], dim=1),
                position_ids=(attention.cumsum(dim=1) - 1).clamp(min=0),
                response_mask=torch.tensor([list(o.response_mask) + [0] * right]),
                attention_mask=attention,
                reward_score=o.reward_score,
                num_turns=o.num_turns,
                metrics=o.metrics,
                extra_fields=dict(o.extra_fields),
            )
        )
    return AgentLoopWorker._postprocess(SimpleNamespace(reward_loop_worker_handles=None), padded)


def _turns(mask: list[int]) -> list[tuple[int, int]]:
    """``(start, end)`` of each run of 1s in a response mask: the model's turns."""
    runs, start = [], None
    for t, m in enumerate([*mask, 0]):
        if m and start is None:
            start = t
        elif not m and start is not None:
            runs.append((start, t))
            start = None
    return runs


def _tokenizer(path: str | None, texts: Sequence[str]) -> Any:
    """The tokenizer at ``path`` (a local Hugging Face folder), else a tiny byte-level one trained on ``texts``."""
    if path:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path)
    from rllm_plugins.tiny import build_tiny_tokenizer

    return build_tiny_tokenizer(list(texts))


def rehearse(
    overrides: Sequence[str],
    prompts: Sequence[str],
    replies: Sequence[str],
    *,
    seed: int = 0,
    tokenizer_path: str | None = None,
    config_name: str = "ppo_trainer",
    config_dir: str | None = None,
) -> Rehearsal:
    """Run the configured agent loop ``actor_rollout_ref.rollout.n`` times per prompt on a CPU and compute its advantages.

    Raises ``ValueError`` naming the mistake for an agent-loop configuration verl would not run, an unknown
    estimator, no prompts or no replies.
    """
    import hydra.utils
    import numpy as np
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.ray_trainer import compute_advantage

    from rllm_verl.registration import register_estimators_into_verl
    from rllm_verl.tools.agent_loop import _current_folder_importable, _defined_loops, agent_loop_errors
    from rllm_verl.tools.check import _compose, extension_status_of

    if not prompts:
        raise ValueError("verl-rehearse needs at least one prompt (--prompt TEXT)")
    if not replies or not all(isinstance(r, str) and r for r in replies):
        raise ValueError(f"verl-rehearse needs the scripted model's replies, non-empty texts (--replies '+,-'), got {list(replies)!r}")
    register_estimators_into_verl()
    extension_status_of("reward_keys")  # anchors from the rows' tokens on the legacy path
    config = _compose(overrides, config_name, config_dir)
    errors = agent_loop_errors(config)
    if errors:
        raise ValueError("; ".join(errors))
    name = str(config.algorithm.adv_estimator)
    if name not in core_algos.ADV_ESTIMATOR_REGISTRY:
        raise ValueError(f"algorithm.adv_estimator={name!r} is no estimator verl knows (rllm-plugins verl-check says more)")
    loop_name = str(OmegaConf.select(config, f"{AGENT}.default_agent_loop"))
    path = OmegaConf.select(config, f"{AGENT}.agent_loop_config_path", default=None)
    defined = _defined_loops(str(path))[0] if path else {}
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    entry = defined.get(loop_name) or _agent_loop_registry[loop_name]
    group_size = int(config.actor_rollout_ref.rollout.n)
    tokenizer = _tokenizer(tokenizer_path, [*prompts, *replies])
    server = ScriptedServer(tokenizer, replies, random.Random(seed))
    with _current_folder_importable():
        loop = hydra.utils.instantiate(
            config=entry,
            trainer_config=DictConfigWrap(config=config),
            server_manager=server,
            tokenizer=tokenizer,
            processor=None,
            hf_model_type=None,
            dataset_cls=None,
            data_config=DictConfigWrap(config.data),
            tools=ToolListWrap([]),
        )
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": False}
    outputs, groups = [], []
    for group, prompt in enumerate(prompts):
        for _ in range(group_size):
            raw_prompt = [{"role": "user", "content": prompt}]
            outputs.append(asyncio.run(loop.run(dict(sampling), raw_prompt=raw_prompt)))
            groups.append(group)
    data = _batch(outputs, tokenizer)
    data.non_tensor_batch["uid"] = np.array([f"prompt{g}" for g in groups], dtype=object)
    data.batch["token_level_rewards"] = data.batch["rm_scores"]
    algorithm = config.algorithm
    data = compute_advantage(
        data,
        adv_estimator=name,
        gamma=algorithm.get("gamma", 1.0),
        lam=algorithm.get("lam", 1.0),
        num_repeat=group_size,
        norm_adv_by_std_in_grpo=algorithm.get("norm_adv_by_std_in_grpo", True),
        config=algorithm,
    )
    rows = []
    for i, output in enumerate(outputs):
        mask = data.batch["response_mask"][i].tolist()
        turns = _turns(mask)
        given = output.extra_fields.get("anchor_states")
        if given is not None:
            anchors = [str(state) for state in given]
        else:  # the environment tokens before each turn; turn 0 at the prompt
            response = data.batch["responses"][i].tolist()
            anchors = ["prompt"] + [repr(tokenizer.decode(response[turns[k - 1][1] : turns[k][0]])) for k in range(1, len(turns))]
        advantages = [float(data.batch["advantages"][i][start]) for start, _ in turns]
        rows.append(RehearsedRow(groups[i], float(output.reward_score or 0.0), anchors, advantages))
    target = str(entry["_target_"])
    return Rehearsal(loop_name, target, name, group_size, list(replies), seed, rows)


def main(argv: Sequence[str] | None = None) -> int:
    """``rllm-plugins verl-rehearse [--agent-loop-config FILE] [--name LOOP] --prompt TEXT [--replies A,B] OVERRIDES...``; exit 1 on a mistake."""
    parser = argparse.ArgumentParser(
        prog="rllm-plugins verl-rehearse",
        description="Run your verl agent loop on a CPU against a scripted stand-in for the rollout server, build the rows as verl's agent "
        "loop does and print turns per row, anchor states and per-turn advantages of the configured algorithm.adv_estimator.",
    )
    parser.add_argument("overrides", nargs="*", help="verl's Hydra overrides, as for the launch (algorithm.adv_estimator=rllm_gigpo ...)")
    parser.add_argument("--agent-loop-config", help=f"shortcut for {AGENT}.agent_loop_config_path=FILE")
    parser.add_argument("--name", help=f"shortcut for {AGENT}.default_agent_loop=NAME")
    parser.add_argument("--prompt", action="append", default=[], help="a user message; one group per prompt (repeat the option)")
    parser.add_argument("--replies", default="+,-", help="comma-separated texts the scripted model answers with, drawn at random each turn")
    parser.add_argument("--seed", type=int, default=0, help="seed of the scripted replies")
    parser.add_argument("--tokenizer", help="a local Hugging Face tokenizer folder (default: a tiny one trained on the prompts and replies)")
    parser.add_argument("--json", action="store_true", help="print the rehearsal as JSON")
    parser.add_argument("--verbose", action="store_true", help="also show what verl prints meanwhile (held back by default)")
    args = parser.parse_args(argv)
    from rllm_verl.tools.check import _held_output

    overrides = list(args.overrides)
    if args.agent_loop_config:
        overrides.append(f"{AGENT}.agent_loop_config_path={args.agent_loop_config}")
    if args.name:
        overrides.append(f"{AGENT}.default_agent_loop={args.name}")
    with _held_output() as held:  # verl's import warnings and log lines
        try:
            rehearsal: Rehearsal | str = rehearse(overrides, args.prompt, args.replies.split(","), seed=args.seed, tokenizer_path=args.tokenizer)
        except ValueError as error:
            rehearsal = f"rllm-plugins verl-rehearse: {error}"
    if args.verbose and held[0].strip():
        print(f"printed by verl and its imports:\n{held[0].strip()}", file=sys.stderr)
    if isinstance(rehearsal, str):
        print(rehearsal, file=sys.stderr)
        return 1
    print(json.dumps(rehearsal.as_dict(), indent=2) if args.json else rehearsal, flush=True)
    return 0
