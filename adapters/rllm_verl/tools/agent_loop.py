"""verl's agent-loop configuration resolved as verl 0.9 resolves it, so a mistake shows before the GPUs start.

verl's ``AgentLoopWorker`` reads ``actor_rollout_ref.rollout.agent.agent_loop_config_path`` (a YAML list of
``{name, _target_, ...}``) through verl's ``resolve_config_path`` (:func:`rllm_verl.versions.resolve_config_path`: an absolute path as is,
else the current folder, else verl's project or package folder), registers each entry by ``name`` next
to verl's own loops (``single_turn_agent``, ``tool_agent``), and builds ``default_agent_loop`` with
Hydra from its ``_target_``. A missing file, a name no file defines or a ``_target_`` that does not
import fail there, on the rollout workers; :func:`agent_loop_errors` names each here, and
:func:`agent_loop_turn_warnings` says when the loop gives every row one turn.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import sys
from collections.abc import Iterator

__all__ = ["agent_loop_errors", "agent_loop_turn_warnings"]

AGENT = "actor_rollout_ref.rollout.agent"
MULTI_TURN = "actor_rollout_ref.rollout.multi_turn"


@contextlib.contextmanager
def _current_folder_importable() -> Iterator[None]:
    """The current folder on ``sys.path`` meanwhile, as ``python -m verl.trainer.main_ppo`` run here has it."""
    added = os.getcwd() not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        yield
    finally:
        if added:
            sys.path.remove(os.getcwd())


def _defined_loops(path: str) -> tuple[dict[str, object], list[str]]:
    """``name -> entry`` of the agent-loop config file ``path`` as verl finds and reads it, and what is wrong with it."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    from rllm_verl.versions import resolve_config_path

    where = f"{AGENT}.agent_loop_config_path={path!r}"
    try:
        resolved = resolve_config_path(path)
    except FileNotFoundError:
        looked = f"the current folder ({os.getcwd()}) or verl's install folders, where verl looks"
        return {}, [f"{where}: no such file in {looked}; run from the folder holding it or give an absolute path"]
    if not os.path.isfile(resolved):
        return {}, [f"{where}: no such file"]
    try:
        entries = OmegaConf.load(resolved)
    except Exception as error:
        return {}, [f"{where}: not YAML verl can read ({type(error).__name__}: {error})"]
    if not isinstance(entries, ListConfig):
        return {}, [f"{where}: verl expects a YAML list of agent loops ('- name: ...' with '_target_: module.Class'), got a {type(entries).__name__}"]
    defined, errors = {}, []
    for index, entry in enumerate(entries):
        if not isinstance(entry, DictConfig) or not isinstance(entry.get("name"), str) or not isinstance(entry.get("_target_"), str):
            errors.append(f"{where}: entry {index} needs 'name' and '_target_' (module.Class), got {entry!r}")
            continue
        defined[entry["name"]] = entry
    return defined, errors


def agent_loop_errors(config: object) -> list[str]:
    """What would stop verl's agent loop workers: the config file, the default loop's name, its class (empty when none)."""
    import hydra.utils
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, _agent_loop_registry

    # verl's own, registered when its agent_loop package is imported (a loop module imported here registers itself too: not counted)
    builtin = {loop: entry for loop, entry in _agent_loop_registry.items() if str(entry.get("_target_", "")).startswith("verl.")}
    path = OmegaConf.select(config, f"{AGENT}.agent_loop_config_path", default=None)  # type: ignore[arg-type]
    name = OmegaConf.select(config, f"{AGENT}.default_agent_loop", default="single_turn_agent")  # type: ignore[arg-type]
    defined, errors = _defined_loops(str(path)) if path else ({}, [])
    if errors:
        return errors
    loops = {**builtin, **defined}
    if name not in loops:
        close = difflib.get_close_matches(str(name), list(loops), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        in_file = f"{path!r} defines {', '.join(map(repr, defined)) or 'none'}" if path else f"no {AGENT}.agent_loop_config_path is set"
        return [f"{AGENT}.default_agent_loop={name!r} is no agent loop verl knows: {in_file}; verl's own are {', '.join(map(repr, builtin))}.{hint}"]
    if name in builtin and name not in defined:
        return []
    target = str(loops[name]["_target_"])
    try:
        with _current_folder_importable():
            cls = hydra.utils.get_class(target)
    except Exception as error:
        cause = error.__cause__ or error
        return [
            f"agent loop {name!r} in {path!r}: _target_ {target!r} does not import ({type(cause).__name__}: {cause}); "
            "its module must be importable from the current folder or PYTHONPATH, on every node"
        ]
    if not (isinstance(cls, type) and issubclass(cls, AgentLoopBase)):
        return [f"agent loop {name!r} in {path!r}: _target_ {target!r} is not a subclass of verl's AgentLoopBase"]
    return []


def agent_loop_turn_warnings(config: object) -> list[str]:
    """For a step-level estimator: why every row would have one turn with this agent loop (empty when it may have several)."""
    from omegaconf import OmegaConf

    name = OmegaConf.select(config, f"{AGENT}.default_agent_loop", default="single_turn_agent")  # type: ignore[arg-type]
    multi_turn = OmegaConf.select(config, MULTI_TURN, default={}) or {}  # type: ignore[arg-type]
    if name == "single_turn_agent":
        return [
            f"this config is single-turn ({AGENT}.default_agent_loop=single_turn_agent, multi_turn.enable={bool(multi_turn.get('enable'))}): "
            "every row has one turn whatever multi_turn.enable says, so a step-level estimator only rescales an outcome-level one "
            "(docs/turn_level.md). Select a multi-turn agent loop (tool_agent with tools, or your own in agent_loop_config_path) or "
            "choose an outcome-level rllm_* estimator"
        ]
    if name == "tool_agent" and not (multi_turn.get("tool_config_path") or multi_turn.get("function_tool_path")):
        return [
            f"{AGENT}.default_agent_loop=tool_agent without tools ({MULTI_TURN}.tool_config_path and function_tool_path unset): "
            "the model has nothing to call, so every row has one turn and a step-level estimator only rescales an outcome-level one; "
            "give it tools or choose an outcome-level rllm_* estimator"
        ]
    if name == "tool_agent" and multi_turn.get("max_assistant_turns") == 1:
        return [f"{MULTI_TURN}.max_assistant_turns=1: tool_agent stops after one model turn, so every row has one turn"]
    return []
