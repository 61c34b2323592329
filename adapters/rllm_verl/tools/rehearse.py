"""Rehearse your verl agent loop on a CPU: turns per row, anchor states and per-turn advantages, before a GPU run.

:func:`rehearse` composes verl's config with the launch overrides, resolves the agent loop as verl's
rollout workers do (:mod:`rllm_verl.tools.agent_loop`) and runs it ``actor_rollout_ref.rollout.n`` times per
prompt (one group) on one event loop, as verl's worker does (:mod:`rllm_verl.tools.rollouts`): verl's own
``single_turn_agent`` and ``tool_agent`` (with the configured tools) or any loop built on ``AgentLoopBase``.
The GPU parts are stand-ins (:mod:`rllm_verl.tools.stand_ins`): a scripted rollout server (each model turn one
of ``replies``, drawn at random with ``seed``), the configured ``custom_reward_function`` or a stand-in reward
for loops that leave ``reward_score`` None, and a stand-in critic (``critic_values``) for value-based estimators.
What each rollout returns is checked against verl's contract (docs/agent_loops.md); any failure raises
:class:`RehearsalError` with every message. The rows then go where the configured trainer puts them: on the
legacy trainer (``trainer.use_v1=false``) into one ``DataProto`` by verl's ``AgentLoopWorker._postprocess`` and
verl's ``compute_advantage``; on the v1 trainer (the default) one row per output, keyed ``{uid}_{session}_{index}``
and served as TransferQueue serves them, into ``compute_advantage_for_multi_trajectories``.
``rllm-plugins verl-rehearse OVERRIDES... --prompt TEXT`` calls :func:`main`.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["RehearsalError", "RehearsedRow", "Rehearsal", "main", "rehearse"]

AGENT = "actor_rollout_ref.rollout.agent"


class RehearsalError(ValueError):
    """The rehearsal could not run, or a rollout returned what verl would not take: every message in ``errors``."""

    def __init__(self, errors: Sequence[str], warnings: Sequence[str] = ()) -> None:
        self.errors, self.warnings = list(errors), list(warnings)
        super().__init__("\n".join(self.errors))


@dataclass
class RehearsedRow:
    """One row: its group (prompt index), rollout and output within it, score, per model turn the anchor state and the
    advantage at its first token, and the scripted replies the row holds (``replies``, in the order the model drew them)."""

    group: int
    reward: float
    anchors: list[str]
    advantages: list[float]
    rollout: int = 0
    output: int = 0
    replies: list[str] = field(default_factory=list)

    @property
    def turns(self) -> int:
        return len(self.advantages)


@dataclass
class Rehearsal:
    """What :func:`rehearse` ran and got: the agent loop, the estimator, the trainer path, the stand-ins used, one
    :class:`RehearsedRow` per row."""

    agent_loop: str
    target: str
    adv_estimator: str
    group_size: int
    replies: list[str]
    seed: int
    rows: list[RehearsedRow] = field(default_factory=list)
    trainer: str = "v1"
    reward: str = "the agent loop's reward_score"
    critic: str | None = None
    warnings: list[str] = field(default_factory=list)
    ok: bool = True
    provenance: str = ""  # which code computed the advantages (an rllm_* estimator's; rllm_plugins.provenance), as a run prints it

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def __str__(self) -> str:
        through = "verl's compute_advantage_for_multi_trajectories (v1 trainer)" if self.trainer == "v1" else "verl's compute_advantage (legacy trainer)"
        head = [
            f"agent loop {self.agent_loop!r} ({self.target}) against a scripted server (replies {', '.join(map(repr, self.replies))}, seed {self.seed})",
            f"{len({row.group for row in self.rows})} prompt(s) x {self.group_size} rollouts, {len(self.rows)} rows; {self.adv_estimator} through {through}",
            f"reward: {self.reward}",
            *([f"critic: {self.critic}"] if self.critic else []),
        ]
        drawn = [" ".join(map(repr, row.replies)) for row in self.rows]
        width = max(len("replies"), *map(len, drawn))
        head.append(f"row  group  rollout  output  reward  turns  {'replies':<{width}}  anchor state -> advantage, per turn")
        body = [
            f"{i:>3}  {row.group:>5}  {row.rollout:>7}  {row.output:>6}  {row.reward:>6.3f}  {row.turns:>5}  {replies:<{width}}  "
            + " | ".join(f"{anchor} -> {advantage:+.4f}" for anchor, advantage in zip(row.anchors, row.advantages, strict=True))
            for i, (row, replies) in enumerate(zip(self.rows, drawn, strict=True))
        ]
        turns = [row.turns for row in self.rows]
        tail = f"turns per row: min {min(turns)}, max {max(turns)}" + (
            "; every row has one turn: a step-level estimator only rescales an outcome-level one" if max(turns) == 1 else ""
        )
        made_by = [f"advantages computed by: {self.provenance}"] if self.provenance else []
        return "\n".join([*head, *body, tail, *made_by, *(f"warning: {w}" for w in self.warnings)])


def _padded(outputs: list[Any], tokenizer: Any) -> Any:
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


def _advantages(name: str, config: Any, outputs: list[Any], uids: list[str], keys: list[str], tokenizer: Any, values: list[float] | None) -> Any:
    """The rows with their advantages, computed by the function the configured trainer calls (legacy or v1)."""
    import numpy as np
    from omegaconf import OmegaConf
    from verl import DataProto

    from rllm_verl.tools.stand_ins import critic_values

    data = _padded(outputs, tokenizer)
    data.non_tensor_batch["uid"] = np.array(uids, dtype=object)
    data.batch["token_level_rewards"] = data.batch["rm_scores"]
    if values is not None:
        data.batch["values"] = critic_values(data.batch["response_mask"], values)
    algorithm = config.algorithm
    kwargs = {
        "adv_estimator": name,
        "gamma": algorithm.get("gamma", 1.0),
        "lam": algorithm.get("lam", 1.0),
        "num_repeat": int(config.actor_rollout_ref.rollout.n),
        "norm_adv_by_std_in_grpo": algorithm.get("norm_adv_by_std_in_grpo", True),
        "config": algorithm,
    }
    if not OmegaConf.select(config, "trainer.use_v1", default=False):
        from verl.trainer.ppo.ray_trainer import compute_advantage

        return compute_advantage(data, **kwargs)
    import torch
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    from rllm_verl.context import V1Batch, serving
    from rllm_verl.extension import extension_status
    from rllm_verl.patches.v1 import V1_BATCH

    fields = ["token_level_rewards", "response_mask", *(["values"] if values is not None else [])]
    rows = DataProto.from_dict(tensors={f: data.batch[f] for f in fields}, non_tensors={"uid": data.non_tensor_batch["uid"]})
    served = {  # what v1 keeps in TransferQueue for each key: unpadded token ids and the loop's extra_fields
        "uid": uids,
        "prompts": [torch.tensor(o.prompt_ids) for o in outputs],
        "responses": [torch.tensor(o.response_ids) for o in outputs],
        "extra_fields": [dict(o.extra_fields) for o in outputs],
    }
    if extension_status().get(V1_BATCH.name, "").startswith("active"):
        with serving(V1Batch(keys, lambda wanted: {f: served[f] for f in wanted})):
            rows = compute_advantage_for_multi_trajectories(rows, keys, **kwargs)
    else:
        rows = compute_advantage_for_multi_trajectories(rows, keys, **kwargs)
    data.batch["advantages"] = rows.batch["advantages"]
    return data


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


def _needs_values(name: str) -> bool:
    """Whether verl's estimator ``name`` reads the critic's values: verl's ``gae``, or an ``rllm_*`` estimator that ``needs_values``."""
    from rllm_plugins.registry import get_estimator
    from rllm_verl.registration import VERL_PREFIX

    if name == "gae":
        return True
    if not name.startswith(VERL_PREFIX):
        return False
    try:
        return bool(get_estimator(name.removeprefix(VERL_PREFIX)).spec.needs_values)
    except ValueError:
        return False


def _tools(config: Any) -> list[Any]:
    """The tools verl's ``AgentLoopWorker`` loads from ``multi_turn.tool_config_path`` and ``function_tool_path``."""
    from omegaconf import OmegaConf
    from verl.tools.tool_registry import load_all_tools

    from rllm_verl.tools.agent_loop import _current_folder_importable
    from rllm_verl.versions import resolve_config_path

    multi_turn = OmegaConf.select(config, "actor_rollout_ref.rollout.multi_turn", default={}) or {}
    tool_config, function_tools = multi_turn.get("tool_config_path"), multi_turn.get("function_tool_path")
    try:
        with _current_folder_importable():  # a tool's class_name is a module of the current folder, as for the agent loop
            return load_all_tools(
                tool_config_path=resolve_config_path(tool_config) if tool_config else None,
                function_tool_path=resolve_config_path(function_tools) if function_tools else None,
            )
    except Exception as error:
        raise RehearsalError([f"the tools of actor_rollout_ref.rollout.multi_turn do not load ({type(error).__name__}: {error})"]) from None


def rehearse(
    overrides: Sequence[str],
    prompts: Sequence[str],
    replies: Sequence[str],
    *,
    seed: int = 0,
    tokenizer_path: str | None = None,
    config_name: str = "ppo_trainer",
    config_dir: str | None = None,
    ground_truth: str | None = None,
    critic_values: Sequence[float] | None = None,
) -> Rehearsal:
    """Run the configured agent loop ``actor_rollout_ref.rollout.n`` times per prompt on a CPU and compute its advantages.

    ``ground_truth`` (default: the first reply) is each prompt's ``reward_model.ground_truth``, for the reward function.
    ``critic_values`` (default 0.0 everywhere) are the stand-in critic's values for a value-based estimator. Raises
    :class:`RehearsalError` (a ``ValueError``) naming each mistake: an agent-loop configuration verl would not run, an
    unknown estimator, no prompts or no replies, and anything a rollout returned that verl would not take.
    """
    import hydra.utils
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop import agent_loop as verl_agent_loop
    from verl.trainer.ppo import core_algos

    from rllm_verl.context import quiet_provenance
    from rllm_verl.registration import VERL_PREFIX, register_estimators_into_verl
    from rllm_verl.tools.agent_loop import _current_folder_importable, _defined_loops, agent_loop_errors
    from rllm_verl.tools.check import _compose, entry_point_policy_error, extension_status_of
    from rllm_verl.tools.loop_outputs import model_spans
    from rllm_verl.tools.rollouts import run_rollouts
    from rllm_verl.tools.stand_ins import Scorer, ScriptedServer
    from rllm_verl.versions import verl_features

    if not prompts:
        raise RehearsalError(["verl-rehearse needs at least one prompt (--prompt TEXT)"])
    if not replies or not all(isinstance(r, str) and r for r in replies):
        raise RehearsalError([f"verl-rehearse needs the scripted model's replies, non-empty texts (--replies '+,-'), got {list(replies)!r}"])
    register_estimators_into_verl()
    try:
        config = _compose(overrides, config_name, config_dir)
    except Exception as error:  # Hydra's own errors name the override
        raise RehearsalError([f"Hydra could not compose the config: {type(error).__name__}: {error}"]) from None
    use_v1 = bool(OmegaConf.select(config, "trainer.use_v1", default=False))
    extension_status_of("v1_batch" if use_v1 else "reward_keys")  # anchors from the rows' tokens
    errors = agent_loop_errors(config)
    if errors:
        raise RehearsalError(errors)
    name = str(config.algorithm.adv_estimator)
    if name not in core_algos.ADV_ESTIMATOR_REGISTRY:
        raise RehearsalError([f"algorithm.adv_estimator={name!r} is no estimator verl knows (rllm-plugins verl-check says more)"])
    loop_name = str(OmegaConf.select(config, f"{AGENT}.default_agent_loop"))
    path = OmegaConf.select(config, f"{AGENT}.agent_loop_config_path", default=None)
    entry = (_defined_loops(str(path))[0] if path else {}).get(loop_name) or verl_agent_loop._agent_loop_registry[loop_name]
    rollout = config.actor_rollout_ref.rollout
    group_size = int(rollout.n)
    values = None
    critic = None
    if _needs_values(name):
        values = list(critic_values) if critic_values else [0.0]
        given = f"{values[0]} on every token" if len(values) == 1 else f"{', '.join(map(str, values))} on model turns 0, 1, ... (the last repeated)"
        launch = "" if OmegaConf.select(config, "critic.enable", default=None) is True else "; the GPU run needs critic.enable=true"
        critic = f"a stand-in: {name} reads a critic's values, here {given} (--critic-values){launch}"
    tokenizer = _tokenizer(tokenizer_path, [*prompts, *replies])
    server = ScriptedServer(tokenizer, replies, random.Random(seed))
    scorer = Scorer(config, tokenizer)
    wrap = verl_agent_loop.DictConfigWrap
    arguments = {  # what verl's worker gives each loop; which of them depends on the release (rllm_verl.versions)
        "trainer_config": wrap(config=config),
        "server_manager": server,
        "tokenizer": tokenizer,
        "processor": None,
        "hf_model_type": None,
        "dataset_cls": None,
        "data_config": wrap(config.data),
    }
    given = verl_features().agent_loop_arguments
    if "tools" in given:  # the worker loads them once (before 0.8, tool_agent loads its own from tool_config_path)
        arguments["tools"] = verl_agent_loop.ToolListWrap(_tools(config))

    def build() -> Any:  # as verl's worker: one object per rollout, built inside the running event loop
        with _current_folder_importable():
            return hydra.utils.instantiate(config=entry, **{name: arguments[name] for name in given})

    limits = {
        "vocab_size": len(tokenizer),
        "response_length": int(rollout.response_length),
        "prompt_length": None if use_v1 else int(rollout.prompt_length),
        "decode": tokenizer.decode,
    }
    truth = replies[0] if ground_truth is None else ground_truth
    results = run_rollouts(build, prompts, group_size, server=server, scorer=scorer, ground_truth=truth, loop_name=loop_name, use_v1=use_v1, limits=limits)
    if results.errors:
        raise RehearsalError(results.errors, results.warnings)
    placed = [(r.group, r.session, i, o) for r in results.rollouts for i, o in enumerate(r.outputs)]
    calls = [r.calls for r in results.rollouts for _ in r.outputs]
    if not placed:
        raise RehearsalError(["no rollout gave an output, so there is no row to compute advantages on"], results.warnings)
    outputs = [o for *_, o in placed]
    keys = [f"prompt{g}_{s}_{i}" for g, s, i, _ in placed]
    try:
        with quiet_provenance():  # said in the rehearsal's report instead
            data = _advantages(name, config, outputs, [f"prompt{g}" for g, *_ in placed], keys, tokenizer, values)
    except Exception as error:  # the estimator (verl's, ours or a plugin's) or an extension raised
        from rllm_verl.tools.rollouts import _raised_at

        raise RehearsalError(
            [
                f"algorithm.adv_estimator={name!r} raised {type(error).__name__}: {error}{_raised_at(error)} on the rehearsed rows. "
                f"Fix: rllm-plugins verl-check algorithm.adv_estimator={name} names its provider and tries its options on toy groups"
            ],
            results.warnings,
        ) from None
    rows = []
    for k, (group, session, index, output) in enumerate(placed):
        turns = _turns(data.batch["response_mask"][k].tolist())
        given = output.extra_fields.get("anchor_states")
        if given is not None:
            anchors = [str(state) for state in given]
        else:  # the environment tokens before each turn; turn 0 at the prompt
            response = data.batch["responses"][k].tolist()
            anchors = ["prompt"] + [repr(tokenizer.decode(response[turns[t - 1][1] : turns[t][0]])) for t in range(1, len(turns))]
        advantages = [float(data.batch["advantages"][k][start]) for start, _ in turns]
        found = model_spans(output.prompt_ids, output.response_ids, calls[k])  # the replies in this row, else all the rollout drew
        drawn = [calls[k][turn].reply for turn, *_ in found] if found else [call.reply for call in calls[k]]
        rows.append(RehearsedRow(group, float(output.reward_score), anchors, advantages, session, index, drawn))
    reward = scorer.described if scorer.used else "the agent loop's reward_score"
    target = str(entry["_target_"])
    trainer = "v1" if use_v1 else "legacy"
    warnings = list(results.warnings)
    unregistered = entry_point_policy_error() if name.startswith(VERL_PREFIX) else None
    if unregistered is not None:  # registered here by the rehearsal itself, not by verl as in the run
        warnings.append(unregistered)
    made_by = _provenance(name, config.algorithm)
    return Rehearsal(loop_name, target, name, group_size, list(replies), seed, rows, trainer, reward, critic, warnings, provenance=made_by)


def _provenance(name: str, algorithm: Any) -> str:
    """The provenance line of the ``rllm_*`` estimator ``name`` with ``algorithm``'s options and transforms ("" for verl's own)."""
    from verl.trainer.ppo import core_algos

    from rllm_plugins.provenance import provenance_line
    from rllm_plugins.registry import get_estimator
    from rllm_verl.compute.outcome import estimator_options, verl_provenance

    ours = getattr(core_algos.ADV_ESTIMATOR_REGISTRY.get(name), "rllm_estimator", None)
    if ours is None:
        return ""
    estimator = get_estimator(ours)
    return provenance_line(verl_provenance(estimator, estimator_options(algorithm, f"advantage estimator {name!r}"), algorithm))


def read_replies(path: str) -> list[str]:
    """``--replies-file PATH``: a JSON list of strings when ``PATH`` ends in ``.json``, else one reply per line (blank lines skipped)."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except OSError as error:
        raise ValueError(f"--replies-file {path!r} cannot be read ({type(error).__name__}: {error.strerror or error})") from None
    if not path.endswith(".json"):
        return [line for line in text.splitlines() if line.strip()]
    try:
        replies = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"--replies-file {path!r} is not JSON ({error}); a .json file holds a list of strings, any other file one reply per line") from None
    if not isinstance(replies, list) or not all(isinstance(r, str) for r in replies):
        raise ValueError(f"--replies-file {path!r} must hold a JSON list of strings, got {type(replies).__name__}")
    return replies


def _chosen_replies(args: argparse.Namespace) -> list[str]:
    """The scripted replies from exactly one of ``--replies`` (once), ``--reply`` (repeated) and ``--replies-file`` (once)."""
    given = [
        *(f"--replies {r!r}" for r in args.replies or []),
        *(f"--reply {r!r}" for r in args.reply),
        *(f"--replies-file {f!r}" for f in args.replies_file or []),
    ]
    kinds = sum(map(bool, (args.replies, args.reply, args.replies_file)))
    if kinds > 1 or len(args.replies or []) > 1 or len(args.replies_file or []) > 1:
        raise ValueError(
            f"the scripted replies come from one option, and {' and '.join(given)} were given: put every reply in one --replies "
            "(comma-separated), or give one --reply per reply (a reply may hold commas), or list them in one --replies-file"
        )
    if args.reply:
        return list(args.reply)
    if args.replies_file:
        return read_replies(args.replies_file[0])
    return (args.replies[0] if args.replies else "+,-").split(",")


def _failure_lines(message: str) -> list[str]:
    """A failure's verdict line, and its fix on a line of its own when it has one (``"... Fix: ..."``)."""
    what, _, fix = message.partition(" Fix: ")
    return [f"rllm-plugins verl-rehearse: {what}", *([f"rllm-plugins verl-rehearse: fix: {fix}"] if fix else [])]


def main(argv: Sequence[str] | None = None) -> int:
    """``rllm-plugins verl-rehearse [--agent-loop-config FILE] [--name LOOP] --prompt TEXT [--reply TEXT ...] [--json] OVERRIDES...``;
    exit 1 on any failure, with a verdict and the fix instead of a traceback (with ``--json`` too: ``{"ok": false, "errors": [...]}``)."""
    parser = argparse.ArgumentParser(
        prog="rllm-plugins verl-rehearse",
        description="Run your verl agent loop on a CPU against a scripted stand-in for the rollout server, check what it returns, build "
        "the rows as verl does and print turns per row, anchor states and per-turn advantages of the configured algorithm.adv_estimator.",
    )
    parser.add_argument("overrides", nargs="*", help="verl's Hydra overrides, as for the launch (algorithm.adv_estimator=rllm_gigpo ...)")
    parser.add_argument("--agent-loop-config", help=f"shortcut for {AGENT}.agent_loop_config_path=FILE")
    parser.add_argument("--name", help=f"shortcut for {AGENT}.default_agent_loop=NAME")
    parser.add_argument("--prompt", action="append", default=[], help="a user message; one group per prompt (repeat the option)")
    parser.add_argument("--reply", action="append", default=[], help="one text the scripted model answers with (repeat the option; a reply may hold commas)")
    parser.add_argument("--replies", action="append", help="comma-separated texts the scripted model answers with, drawn at random each turn (default '+,-')")
    parser.add_argument("--replies-file", action="append", help="the replies in a file: one per line, or a JSON list of strings in a file ending in .json")
    parser.add_argument("--seed", type=int, default=0, help="seed of the scripted replies")
    parser.add_argument("--tokenizer", help="a local Hugging Face tokenizer folder (default: a tiny one trained on the prompts and replies)")
    parser.add_argument(
        "--ground-truth", help="each prompt's reward_model.ground_truth, for custom_reward_function or the stand-in reward (default: the first reply)"
    )
    parser.add_argument("--critic-values", help="the stand-in critic of a value-based estimator: a number for every token, or one per model turn (default 0)")
    parser.add_argument("--json", action="store_true", help="print the rehearsal as JSON")
    parser.add_argument("--verbose", action="store_true", help="also show what verl prints meanwhile (held back by default)")
    args = parser.parse_args(argv)
    from rllm_verl.tools.check import _held_output
    from rllm_verl.tools.rollouts import _raised_at
    from rllm_verl.tools.stand_ins import parse_critic_values
    from rllm_verl.tools.verl_import import REHEARSE_MODULES, verl_import_error

    overrides = list(args.overrides)
    if args.agent_loop_config:
        overrides.append(f"{AGENT}.agent_loop_config_path={args.agent_loop_config}")
    if args.name:
        overrides.append(f"{AGENT}.default_agent_loop={args.name}")
    with _held_output() as held:  # verl's import warnings and log lines
        try:
            replies = _chosen_replies(args)
            values = parse_critic_values(args.critic_values) if args.critic_values else None
            cannot_import = verl_import_error(REHEARSE_MODULES)
            if cannot_import is not None:
                raise RehearsalError([cannot_import])
            rehearsal: Rehearsal | RehearsalError = rehearse(
                overrides, args.prompt, replies, seed=args.seed, tokenizer_path=args.tokenizer, ground_truth=args.ground_truth, critic_values=values
            )
        except RehearsalError as error:
            rehearsal = error
        except ValueError as error:
            rehearsal = RehearsalError([str(error)])
        except Exception as error:  # verl, a plugin or the loop's code failed where no check names it
            rehearsal = RehearsalError(
                [f"the rehearsal stopped: {type(error).__name__}: {error}{_raised_at(error)}. Fix: --verbose shows what verl printed meanwhile"]
            )
    if args.verbose and held[0].strip():
        print(f"printed by verl and its imports:\n{held[0].strip()}", file=sys.stderr)
    if isinstance(rehearsal, RehearsalError):
        if args.json:
            print(json.dumps({"ok": False, "errors": rehearsal.errors, "warnings": rehearsal.warnings}, indent=2), flush=True)
        else:
            for warning in rehearsal.warnings:
                print(f"rllm-plugins verl-rehearse: warning: {warning}", file=sys.stderr)
            print("\n".join(line for e in rehearsal.errors for line in _failure_lines(e)), file=sys.stderr)
        return 1
    print(json.dumps(rehearsal.as_dict(), indent=2) if args.json else rehearsal, flush=True)
    return 0
