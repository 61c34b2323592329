"""What a reward shaper is: :class:`ShaperSpec` (a plugin yields these) and its options.

A shaper runs before the estimator, on one role's rewards: ``fn(rewards, **options)`` gets each unit's reward
``(N,)`` float64 (a trajectory, or a session of several outputs; read-only) and returns additive terms: an array
``(N,)`` (one term, labelled by the shaper) or a mapping ``{term name: (N,)}`` (several, each recorded on its own).
The estimator then sees ``rewards + every term of every shaper``. Every shaper sees the rewards before any shaping,
so the order of the list changes no number. A shaper may name any of :data:`SHAPER_CONTEXT` as a keyword parameter to
receive it; every other keyword parameter with a default is an *option*, set by the user.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .names import validate_name

__all__ = ["SHAPER_CONTEXT", "Shaper", "ShaperSpec", "shaper_context", "shaper_options"]

SHAPER_CONTEXT: Mapping[str, str] = {
    "offsets": "int64 (G+1,): group g holds units offsets[g]:offsets[g+1] (the answers to one task)",
    "scores": (
        "float64 (N,): each unit's task score (verl's token_level_scores summed over the unit, where its rewards may carry the "
        "KL penalty; elsewhere the same as the rewards)"
    ),
    "lengths": "float64 (N,): each unit's model tokens (a trajectory's steps' response_ids; verl: response_mask summed; TRL: completion tokens)",
    "input_lengths": "float64 (N,): each unit's prompt tokens, where the framework has them (its first output's prompt)",
    "tool_lengths": "float64 (N,): each unit's tool and environment tokens inside its responses, where the framework has them",
    "turns": "float64 (N,): each unit's number of model turns (steps; verl: outputs of a session, or turns found in the response mask)",
    "role": "str: the role whose rewards these are",
}
"""What a shaper may receive by naming it (the documented context); never a user option."""


@dataclass(frozen=True)
class ShaperSpec:
    """One reward shaper: ``name``, ``fn(rewards, **options)`` returning additive terms, what it is.

    ``requires`` lists the context keywords it cannot run without (a path that has no such value refuses it at
    config time, naming the keyword); ``options`` are derived from ``fn``'s signature.
    """

    name: str
    fn: Callable[..., Any]
    description: str = ""
    requires: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", validate_name(self.name, "ShaperSpec.name"))
        if not callable(self.fn):
            raise TypeError(f"ShaperSpec {self.name!r}: fn must be callable, got {type(self.fn).__name__}")
        unknown = sorted(set(self.requires) - set(SHAPER_CONTEXT))
        if unknown:
            raise ValueError(f"ShaperSpec {self.name!r}: requires names {unknown}, which are no context keywords ({', '.join(SHAPER_CONTEXT)})")


def _parameters(fn: Callable[..., Any]) -> list[inspect.Parameter]:
    try:
        return list(inspect.signature(fn).parameters.values())[1:]  # the first is the rewards
    except (TypeError, ValueError):
        return []


def shaper_options(spec: ShaperSpec) -> dict[str, Any]:
    """The options of ``spec``: keyword parameters of ``fn`` after the rewards that are no context keyword, with their defaults."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name: p.default for p in _parameters(spec.fn) if p.kind in kinds and p.name not in SHAPER_CONTEXT}


def shaper_context(spec: ShaperSpec) -> frozenset[str]:
    """The context keywords ``spec.fn`` names (it receives those, and only those)."""
    return frozenset(p.name for p in _parameters(spec.fn) if p.name in SHAPER_CONTEXT)


@dataclass(frozen=True)
class Shaper:
    """A registered shaper: its spec and where it comes from."""

    spec: ShaperSpec
    provider: Any  # a rllm_plugins.spec.Provider (not imported here: the configuration reads this module)
