"""The installed axolotl and what the plugin relies on in it: the one module of ``rllm_axolotl`` that reads axolotl's version.

``rllm_axolotl`` supports axolotl ``>=0.21,<0.22`` (:data:`SUPPORTED_AXOLOTL`; axolotl 0.21 pins ``trl==1.14.1`` and
``transformers==5.20.1``, inside ``rllm_trl``'s range). What it relies on, each checked by :func:`problems` and pinned
by ``integration_tests/axolotl/test_versions.py``:

- :data:`PLUGIN_HOOKS`: the methods of axolotl's ``BasePlugin`` the plugin overrides, with their parameters;
- :data:`STRATEGY_METHODS`: ``GRPOStrategy``'s choice of the GRPO trainer class (``context_parallel``, ``async_grpo``) and
  the reward functions and trainer keywords it builds from the config. axolotl's RL builder gives a plugin's trainer class
  neither the model nor these (it passes them only to its own classes), so the trainer class adds them (:mod:`rllm_axolotl.plugin`);
- that ``AxolotlGRPOTrainer`` is a ``trl.GRPOTrainer`` whose reward and scoring hooks are TRL's own (``rllm_trl``'s mixin
  overrides them: :func:`rllm_trl.versions.check_hooks`);
- :data:`REFUSED`: the two GRPO trainers whose advantages the plugin cannot replace, each with the method where that trainer
  computes them itself; a release in which one of them no longer defines them is a change to look at (the test fails).

An axolotl outside :data:`SUPPORTED_AXOLOTL` whose checks pass runs, with one ``UserWarning``; a failed check is a
``ValueError`` naming what changed, raised when axolotl validates the config.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass
from functools import cache
from importlib.metadata import version

from packaging.specifiers import SpecifierSet
from packaging.version import Version

__all__ = [
    "AXOLOTL_VERSION",
    "PLUGIN_HOOKS",
    "REFUSED",
    "STRATEGY_METHODS",
    "SUPPORTED_AXOLOTL",
    "Refused",
    "check_axolotl",
    "describe",
    "problems",
]

SUPPORTED_AXOLOTL = SpecifierSet(">=0.21,<0.22")
AXOLOTL_VERSION = Version(version("axolotl"))

# BasePlugin method -> its parameters (the plugin overrides each)
PLUGIN_HOOKS: dict[str, tuple[str, ...]] = {
    "get_input_args": ("self",),
    "get_trainer_cls": ("self", "cfg"),
    "add_callbacks_pre_trainer": ("self", "cfg", "model"),
}
# GRPOStrategy classmethod -> its parameters (bound: no cls)
STRATEGY_METHODS: dict[str, tuple[str, ...]] = {
    "get_trainer_class": ("context_parallel", "async_grpo", "sequence_parallel"),
    "set_trainer_args": ("cfg",),
    "set_trainer_kwargs": ("cfg",),
}


@dataclass(frozen=True)
class Refused:
    """A GRPO trainer of axolotl the plugin refuses: when axolotl picks it, the method that computes its advantages, and why."""

    trainer: str
    when: str
    defined_in: str  # the class (axolotl's) whose own methods compute the advantages
    methods: tuple[str, ...]
    why: str


REFUSED: tuple[Refused, ...] = (
    Refused(
        "AxolotlAsyncGRPOTrainer",
        "trl.async_prefetch or trl.use_data_producer",
        "AsyncGRPOTrainer",
        ("_compute_deferred_scores", "_compute_streaming_group_scores"),
        "axolotl's AsyncGRPOTrainer (under FastAsyncGRPOTrainer) computes the advantages in its own code (group mean, std + 1e-4) "
        "for deferred and for streamed groups, never through TRL's _generate_and_score_completions that rllm-plugins replaces",
    ),
    Refused(
        "AxolotlGRPOContextParallelTrainer",
        "context_parallel_size > 1",
        "AxolotlGRPOContextParallelTrainer",
        ("_generate_and_score_completions",),
        "its own _generate_and_score_completions scores the completions inline (no _calculate_rewards) and computes the advantages "
        "itself (group mean, std + 1e-4) on a batch shared by each context-parallel group",
    ),
)


def _versions() -> str:
    import trl

    return f"axolotl {AXOLOTL_VERSION} (trl {trl.__version__})"


def _params(function: object) -> tuple[str, ...] | None:
    return tuple(inspect.signature(function).parameters) if callable(function) else None


def problems() -> list[str]:
    """What the plugin relies on and the installed axolotl lacks, one sentence each; ``[]`` when nothing is missing."""
    from axolotl.core.trainers.grpo import AxolotlGRPOTrainer, GRPOStrategy
    from axolotl.integrations.base import BasePlugin
    from rllm_trl.versions import HOOKS, hook_problem
    from trl import GRPOTrainer

    found = []
    for name, parameters in PLUGIN_HOOKS.items():
        has = _params(getattr(BasePlugin, name, None))
        if has != parameters:
            found.append(f"BasePlugin.{name} taking {parameters}, and {_versions()} has {has or 'no such method'}")
    for name, parameters in STRATEGY_METHODS.items():
        has = _params(getattr(GRPOStrategy, name, None))
        if has != parameters:
            found.append(f"GRPOStrategy.{name} taking {parameters}, and {_versions()} has {has or 'no such method'}")
    if not issubclass(AxolotlGRPOTrainer, GRPOTrainer):
        found.append(f"AxolotlGRPOTrainer as a subclass of trl.GRPOTrainer, and in {_versions()} it is not")
    else:
        for hook in HOOKS:
            problem = hook_problem(hook, AxolotlGRPOTrainer)
            if problem is not None:
                found.append(problem)
        own = [c.__name__ for c in AxolotlGRPOTrainer.__mro__ if c is not GRPOTrainer and c is not object and "_calculate_rewards" in c.__dict__]
        if own:
            found.append(f"AxolotlGRPOTrainer to score through TRL's _calculate_rewards, and in {_versions()} {own[0]} defines its own")
    return found


def check_axolotl(where: str = "rllm_axolotl") -> None:
    """Raise ``ValueError`` naming what changed when :func:`problems` finds any; warn once outside :data:`SUPPORTED_AXOLOTL`."""
    found = problems()
    if found:
        raise ValueError(
            f"{where}: rllm-plugins relies on " + "; on ".join(found) + "; install an axolotl in rllm-plugins' range: "
            f'pip install "axolotl{SUPPORTED_AXOLOTL}"'
        )
    _warn_untested()


@cache
def _warn_untested() -> None:
    if AXOLOTL_VERSION not in SUPPORTED_AXOLOTL:
        warnings.warn(
            f"rllm_axolotl is tested with axolotl{SUPPORTED_AXOLOTL}; {_versions()} is installed. What the plugin relies on still "
            f'matches; if its advantages look wrong, install a supported axolotl: pip install "axolotl{SUPPORTED_AXOLOTL}"',
            UserWarning,
            stacklevel=4,
        )


def describe() -> dict[str, object]:
    """The installed axolotl, whether it is in range, and what is missing (``problems``)."""
    return {"axolotl": str(AXOLOTL_VERSION), "supported": AXOLOTL_VERSION in SUPPORTED_AXOLOTL, "problems": problems()}
