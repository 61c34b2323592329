"""The installed TRL and transformers, and what the adapter relies on in them: the one module that reads their versions.

``rllm_trl`` supports TRL ``>=1.14,<1.17`` (:data:`SUPPORTED_TRL`) on every transformers TRL accepts (4.56.2 and
later, 4.x and 5.x). What it relies on, each checked here and pinned by ``integration_tests/trl/test_versions.py``:

- :data:`HOOKS`: the private methods ``RLLMAdvantageMixin`` overrides (TRL has no advantage hook), with their
  parameters, the same in TRL 1.14.2, 1.15.0 and 1.16.0 and, for ``Trainer``'s, in transformers 4.57 and 5.x.
  :func:`check_hooks` raises ``ValueError`` naming the feature, the method and both versions when one differs;
  ``RLLMGRPOConfig`` runs it when it is built, the trainer again for its own class;
- :data:`CONFIG_FIELDS`: the ``GRPOConfig`` fields the adapter reads, with TRL's defaults (:func:`check_config_fields`);
- :data:`TRAINER_ATTRIBUTES` and :data:`OUTPUT_KEYS`: what a built ``GRPOTrainer`` holds and what its
  ``_generate_and_score_completions`` returns, read by the mixin;
- :data:`TOOL_PATHS`: the multi-turn arguments of ``GRPOTrainer`` (``tools``, ``environment_factory``,
  ``rollout_func``), the attribute each leaves on the trainer, and the transformers TRL needs for it
  (TRL's tool loop parses tool calls with transformers 5 APIs). :func:`check_tool_paths` refuses a path the
  installed versions lack, by name, before TRL builds anything.

- :data:`TRITON_ONLY_LOGPROBS`: the TRL releases that compute every log-probability with a Triton kernel and have
  no torch fallback (1.15: without Triton each step fails inside TRL); :func:`logprob_problem` says so at config time.

A TRL outside :data:`SUPPORTED_TRL` whose hooks still match runs, with one ``UserWarning``.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib.util import find_spec
from typing import Any

import transformers
import trl
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from trl import GRPOConfig, GRPOTrainer

__all__ = [
    "CONFIG_FIELDS",
    "HOOKS",
    "OUTPUT_KEYS",
    "PARSER_WITHOUT_JMESPATH",
    "TRITON_ONLY_LOGPROBS",
    "SUPPORTED_TRL",
    "TOOL_PATHS",
    "TRAINER_ATTRIBUTES",
    "TRANSFORMERS_VERSION",
    "TRL_VERSION",
    "Hook",
    "ToolPath",
    "check_config_fields",
    "check_hooks",
    "check_logprobs",
    "check_output",
    "check_tool_paths",
    "check_trainer_attributes",
    "check_trl_compatibility",
    "describe",
    "hook_problem",
    "logprob_problem",
    "tool_path_problem",
]

SUPPORTED_TRL = SpecifierSet(">=1.14,<1.17")
TRL_VERSION = Version(trl.__version__)
TRANSFORMERS_VERSION = Version(transformers.__version__)

ADVANTAGES = "rLLM advantages"
STATE_CHECKPOINTS = "estimator state checkpoints (a stateful estimator's state saved with each checkpoint and read on resume)"


@dataclass(frozen=True)
class Hook:
    """A method the mixin overrides or calls: its name, the parameters it has, the class that defines it, what needs it."""

    name: str
    parameters: tuple[str, ...]
    owner: str  # "GRPOTrainer" (TRL) or "Trainer" (transformers)
    feature: str


HOOKS: tuple[Hook, ...] = (
    Hook("_calculate_rewards", ("self", "inputs", "prompts", "completions", "completion_ids_list"), "GRPOTrainer", ADVANTAGES),
    Hook("_generate_and_score_completions", ("self", "inputs"), "GRPOTrainer", ADVANTAGES),
    Hook("_save_checkpoint", ("self", "model", "trial"), "Trainer", STATE_CHECKPOINTS),
    Hook("_load_optimizer_and_scheduler", ("self", "checkpoint"), "Trainer", STATE_CHECKPOINTS),
    Hook("_get_output_dir", ("self", "trial"), "Trainer", STATE_CHECKPOINTS),
)

# GRPOConfig field -> TRL's default: the adapter reads these (a changed default changes what a config means)
CONFIG_FIELDS: dict[str, Any] = {
    "num_generations": 8,
    "num_generations_eval": None,
    "scale_rewards": "group",
    "multi_objective_aggregation": "sum_then_normalize",
    "reward_weights": None,
    "remove_unused_columns": False,
}

# set by GRPOTrainer.__init__, read by the mixin at every generation (eos_token_ids, only since TRL 1.14.2, is read where set: rollouts.py)
TRAINER_ATTRIBUTES = ("accelerator", "reward_weights", "reward_func_names", "num_generations", "num_generations_eval", "_metrics", "_logs")

# keys of _generate_and_score_completions' output the mixin reads ("tool_mask" only on multi-turn rows)
OUTPUT_KEYS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages")


@dataclass(frozen=True)
class ToolPath:
    """A multi-turn argument of ``GRPOTrainer.__init__``: the attribute it leaves on the trainer, the transformers TRL needs
    for it, and whether TRL's tool-call parser runs (it needs ``jmespath`` below transformers :data:`PARSER_WITHOUT_JMESPATH`)."""

    argument: str
    attribute: str
    min_transformers: Version | None
    parses_tool_calls: bool
    what: str


TOOL_PATHS: tuple[ToolPath, ...] = (
    ToolPath("tools", "tools", Version("5.0.0"), True, "TRL's tool loop"),
    ToolPath("environment_factory", "environment_factories", Version("5.2.0"), True, "TRL's tool loop on environments"),
    ToolPath("rollout_func", "rollout_func", None, False, "a rollout function returning env_mask"),
)
PARSER_WITHOUT_JMESPATH = Version("5.13.0.dev0")  # transformers' response_template parser; before it, TRL's response_schema parser needs jmespath


# TRL 1.15 runs its fused LM head (every log-probability, in every step) through a Triton kernel without a torch
# fallback: without Triton, or on a device Triton has no driver for, each step fails; 1.16 folds the tiles in torch there
TRITON_ONLY_LOGPROBS = SpecifierSet(">=1.15,<1.16")
TRITON_DEVICES = ("cuda", "xpu")


def _versions() -> str:
    return f"TRL {TRL_VERSION} (transformers {TRANSFORMERS_VERSION})"


def _install_hint() -> str:
    return f'install a TRL in rllm-plugins\' range: pip install "trl{SUPPORTED_TRL}"'


def hook_problem(hook: Hook, trainer_class: type = GRPOTrainer) -> str | None:
    """Why ``trainer_class`` lacks ``hook`` as the mixin needs it, in one sentence; None when it has it."""
    method = getattr(trainer_class, hook.name, None)
    found = tuple(inspect.signature(method).parameters) if callable(method) else None
    if found == hook.parameters:
        return None
    has = f"takes {found}" if found is not None else "has no such method"
    return (
        f"{hook.feature} need {trainer_class.__name__}.{hook.name} taking {hook.parameters} (from {hook.owner}), "
        f"and with {_versions()} it {has}; {_install_hint()}"
    )


def check_hooks(trainer_class: type = GRPOTrainer, *, state: bool = True, where: str = "rllm_trl") -> None:
    """Raise ``ValueError`` when ``trainer_class`` lacks a hook of :data:`HOOKS` (the state ones only with ``state``).

    Warns once when the installed TRL is outside :data:`SUPPORTED_TRL` and the hooks still match.
    """
    for hook in HOOKS:
        if hook.feature == STATE_CHECKPOINTS and not state:
            continue
        problem = hook_problem(hook, trainer_class)
        if problem is not None:
            raise ValueError(f"{where}: {problem}")
    _warn_untested()


@cache
def _warn_untested() -> None:
    if TRL_VERSION not in SUPPORTED_TRL:
        warnings.warn(
            f"rllm_trl is tested with trl{SUPPORTED_TRL}; {_versions()} is installed. The methods it overrides still match; "
            "if its advantages or checkpoints look wrong, " + _install_hint(),
            UserWarning,
            stacklevel=4,
        )


def check_trl_compatibility(trainer_class: type = GRPOTrainer) -> None:
    """Raise ``ValueError`` if a method the mixin overrides (any of :data:`HOOKS`) differs in ``trainer_class``."""
    check_hooks(trainer_class, where="rllm_trl")


@cache
def _grpo_config_fields() -> dict[str, Any]:
    fields = {}
    for f in dataclasses.fields(GRPOConfig):
        fields[f.name] = f.default if f.default is not dataclasses.MISSING else dataclasses.MISSING
    return fields


def check_config_fields(where: str = "RLLMGRPOConfig") -> None:
    """Raise ``ValueError`` when ``GRPOConfig`` lacks a field of :data:`CONFIG_FIELDS` or its default is not the one the adapter reads it as."""
    fields = _grpo_config_fields()
    for name, default in CONFIG_FIELDS.items():
        if name not in fields:
            raise ValueError(f"{where}: rllm_trl reads GRPOConfig.{name}, which {_versions()} does not have; {_install_hint()}")
        if fields[name] != default:
            raise ValueError(
                f"{where}: rllm_trl reads GRPOConfig.{name} with TRL's default {default!r}, and {_versions()} has {fields[name]!r}; {_install_hint()}"
            )


def check_trainer_attributes(trainer: Any) -> None:
    """Raise ``ValueError`` when a built trainer lacks an attribute of :data:`TRAINER_ATTRIBUTES` the mixin reads."""
    missing = [name for name in TRAINER_ATTRIBUTES if not hasattr(trainer, name)]
    if missing:
        raise ValueError(f"{type(trainer).__name__}: rllm_trl reads {missing} of a built GRPOTrainer, which {_versions()} does not set; {_install_hint()}")


def check_output(output: Mapping[str, Any]) -> None:
    """Raise ``RuntimeError`` when ``_generate_and_score_completions`` returned no key of :data:`OUTPUT_KEYS` the mixin reads."""
    missing = [key for key in OUTPUT_KEYS if key not in output]
    if missing:
        raise RuntimeError(f"GRPOTrainer._generate_and_score_completions returned no {missing} with {_versions()}; {_install_hint()}")


def tool_path_problem(path: ToolPath) -> str | None:
    """Why the installed TRL and transformers cannot train through ``path``, with the fix; None when they can."""
    if path.argument not in inspect.signature(GRPOTrainer.__init__).parameters:
        return f"{path.argument}= ({path.what}) is not an argument of GRPOTrainer in {_versions()}; {_install_hint()}"
    if path.min_transformers is not None and path.min_transformers > TRANSFORMERS_VERSION:
        other = " or ".join(f"{p.argument}=" for p in TOOL_PATHS if p.min_transformers is None or p.min_transformers <= TRANSFORMERS_VERSION)
        return (
            f"{path.argument}= ({path.what}) needs transformers>={path.min_transformers} in TRL, and {_versions()} is installed: "
            f'pip install "transformers>={path.min_transformers}"' + (f", or train through {other} (it runs on this transformers)" if other else "")
        )
    if path.parses_tool_calls and TRANSFORMERS_VERSION < PARSER_WITHOUT_JMESPATH and find_spec("jmespath") is None:
        return f"{path.argument}= ({path.what}) parses tool calls with jmespath below transformers 5.13, and {_versions()} is installed: pip install jmespath"
    return None


def check_tool_paths(init: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any], where: str) -> None:
    """Raise ``ValueError`` when the arguments of a ``GRPOTrainer`` ``init`` call ask for a path of :data:`TOOL_PATHS` the installed versions lack."""
    try:
        bound = inspect.signature(init).bind_partial(None, *args, **kwargs).arguments
    except TypeError:  # TRL names the wrong argument itself
        return
    for path in TOOL_PATHS:
        if bound.get(path.argument):  # as TRL reads them: tools=[] asks for nothing
            problem = tool_path_problem(path)
            if problem is not None:
                raise ValueError(f"{where}: {problem}")


def logprob_problem(device_type: str) -> str | None:
    """Why the installed TRL cannot compute log-probabilities on a ``device_type`` device (``"cpu"``, ``"cuda"``), with the fix; None when it can."""
    if TRL_VERSION not in TRITON_ONLY_LOGPROBS:
        return None
    fix = 'install trl 1.14 or 1.16 (pip install "trl>=1.16,<1.17")'
    if find_spec("triton") is None:
        return f"{_versions()} computes every log-probability with a Triton kernel and Triton is not installed (each step would fail inside TRL); {fix}"
    if device_type in TRITON_DEVICES or os.environ.get("TRITON_INTERPRET") == "1":
        return None
    return (
        f"{_versions()} computes every log-probability with a Triton kernel, which has no {device_type} driver (each step would fail inside TRL); "
        f"{fix}, train on a GPU, or set TRITON_INTERPRET=1 (Triton's interpreter: slow)"
    )


def check_logprobs(args: Any, where: str) -> None:
    """Raise ``ValueError`` when the installed TRL cannot compute log-probabilities on the device of ``args`` (a ``GRPOConfig``)."""
    if TRL_VERSION not in TRITON_ONLY_LOGPROBS:
        return
    device = getattr(args, "device", None)
    problem = logprob_problem(getattr(device, "type", "cpu"))
    if problem is not None:
        raise ValueError(f"{where}: {problem}")


def describe() -> dict[str, Any]:
    """The installed versions and what they offer: ``trl``, ``transformers``, ``supported`` (in range), ``tool_paths`` (argument -> None or why not)."""
    return {
        "trl": str(TRL_VERSION),
        "transformers": str(TRANSFORMERS_VERSION),
        "supported": TRL_VERSION in SUPPORTED_TRL,
        "tool_paths": {path.argument: tool_path_problem(path) for path in TOOL_PATHS},
    }
