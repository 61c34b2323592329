"""What an advantage transform is: :class:`TransformSpec` (a plugin yields these) and its options.

A transform runs after the estimator, on one role's advantages: ``fn(advantages, **options)`` returns
new advantages of the same shape (a fresh array; the input is never changed). ``level="sequence"``
(the default) gets one value per unit in the collector's order: per trajectory for outcome-level
estimators, per step (turn) for step-level ones. ``level="token"`` gets ``(B, T)`` per-token advantages
with ``mask`` (and, where the framework has them, ``logprobs`` and ``ref_logprobs``). A transform may
name any of :data:`CONTEXT_KEYWORDS` as a keyword parameter to receive it; every other keyword parameter
with a default is an *option*, set by the user. ``elementwise=True`` says the result at a position depends
only on the value there (``clip``, ``scale``): such a transform also applies to token-level advantages
(verl's ``gae``, step-level estimators in verl and TRL), position by position.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .names import validate_name

__all__ = ["CONTEXT_KEYWORDS", "Transform", "TransformSpec", "transform_context", "transform_options"]

CONTEXT_KEYWORDS: Mapping[str, str] = {
    "offsets": "int64 (G+1,): group g holds units offsets[g]:offsets[g+1] (sequence level: trajectories or steps of one task group)",
    "rewards": "float64 (N,): each unit's reward (the trajectory's reward; a step's own reward at the step level)",
    "scores": (
        "float64 (N,): each unit's task score before any shaping (verl's token_level_scores summed over the unit, where its rewards "
        "may carry the KL penalty; elsewhere the same as rewards)"
    ),
    "lengths": "float64 (N,): each unit's number of response tokens",
    "mean_logprobs": "float64 (N,): each unit's mean log-probability of its response tokens under the rollout policy, where the framework has it",
    "turn_index": "int64 (N,): each step's index within its trajectory (step level; 0 for outcome level)",
    "traj_offsets": "int64 (M+1,): trajectory m holds units traj_offsets[m]:traj_offsets[m+1] (steps; at the outcome level one each)",
    "mask": "(B, T) 0/1: the model's tokens (token level)",
    "logprobs": "float (B, T): the policy's log-probability of each token, where the framework has it (token level)",
    "ref_logprobs": "float (B, T): the reference model's log-probability of each token, where the framework has it (token level)",
    "role": "str: the role whose advantages these are",
    "sum_over_processes": (
        "callable, float64 (K,) -> (K,): each value summed over every process that holds a share of the batch, called by every "
        "process alike (token level; TRL with several processes; absent where one process holds the whole batch)"
    ),
}
"""What a transform may receive by naming it (the documented context); never a user option."""


@dataclass(frozen=True)
class TransformSpec:
    """One advantage transform: ``name``, ``fn(advantages, **options)``, what it is.

    ``requires`` lists the context keywords it cannot run without (a framework that has no such value
    refuses it at config time, naming the keyword); ``options`` are derived from ``fn``'s signature.
    """

    name: str
    fn: Callable[..., Any]
    description: str = ""
    level: Literal["sequence", "token"] = "sequence"
    elementwise: bool = False
    requires: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", validate_name(self.name, "TransformSpec.name"))
        if not callable(self.fn):
            raise TypeError(f"TransformSpec {self.name!r}: fn must be callable, got {type(self.fn).__name__}")
        if self.level not in ("sequence", "token"):
            raise ValueError(f"TransformSpec {self.name!r}: level must be 'sequence' or 'token', got {self.level!r}")
        unknown = sorted(set(self.requires) - set(CONTEXT_KEYWORDS))
        if unknown:
            raise ValueError(f"TransformSpec {self.name!r}: requires names {unknown}, which are no context keywords ({', '.join(CONTEXT_KEYWORDS)})")


def _parameters(fn: Callable[..., Any]) -> list[inspect.Parameter]:
    try:
        return list(inspect.signature(fn).parameters.values())[1:]  # the first is the advantages
    except (TypeError, ValueError):
        return []


def transform_options(spec: TransformSpec) -> dict[str, Any]:
    """The options of ``spec``: keyword parameters of ``fn`` after the advantages that are no context keyword, with their defaults."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name: p.default for p in _parameters(spec.fn) if p.kind in kinds and p.name not in CONTEXT_KEYWORDS}


def transform_context(spec: TransformSpec) -> frozenset[str]:
    """The context keywords ``spec.fn`` names (it receives those, and only those)."""
    return frozenset(p.name for p in _parameters(spec.fn) if p.name in CONTEXT_KEYWORDS)


@dataclass(frozen=True)
class Transform:
    """A registered transform: its spec and where it comes from."""

    spec: TransformSpec
    provider: Any  # a rllm_plugins.spec.Provider (not imported here: the configuration reads this module)
