"""The one module that knows the installed ms-swift and what the seam relies on in it.

The seam (:mod:`rllm_swift.seam`) replaces two functions of ``swift.rl_core.advantage``; it installs only when each has
exactly the parameters listed in :data:`SIGNATURES` (names, order, defaults). :data:`SUPPORTED` is the range the
version matrix tests (the ``ms-swift-4.6`` cell); a release outside it whose functions still match is used, with a
warning naming the range. :data:`CONSUMERS` are the modules of ms-swift that bind these functions by name (``from
swift.rl_core.advantage import compute_advantages``): the seam replaces them there too when they were imported first.
"""

from __future__ import annotations

import inspect
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType
from typing import Any

__all__ = [
    "ADVANTAGE_MODULE",
    "CONSUMERS",
    "DISTRIBUTION",
    "FUNCTIONS",
    "SIGNATURES",
    "SUPPORTED",
    "SwiftSeamError",
    "installed_version",
    "signature_problems",
    "supported",
]

DISTRIBUTION = "ms-swift"
SUPPORTED = (">=4.6", "<4.7")
"""The ms-swift releases the matrix tests: 4.6.x (``pip install "ms-swift>=4.6,<4.7"``)."""
ADVANTAGE_MODULE = "swift.rl_core.advantage"
FUNCTIONS = ("compute_advantages", "compute_advantages_dynamic")
_SHARED = (("advantage_estimator", "grpo"), ("scale_rewards", "group"), ("kl_in_reward", False), ("beta", 0.0), ("kl_values", None))
_REQUIRED = inspect.Parameter.empty
SIGNATURES: dict[str, tuple[tuple[str, Any], ...]] = {
    "compute_advantages": (("rewards_per_func", _REQUIRED), ("reward_weights", _REQUIRED), ("num_generations", _REQUIRED), *_SHARED),
    "compute_advantages_dynamic": (
        ("rewards_per_func", _REQUIRED),
        ("reward_weights", _REQUIRED),
        ("prompt_ids", _REQUIRED),
        ("request_ids", _REQUIRED),
        *_SHARED,
    ),
}
"""Each function's parameters as ms-swift 4.6 defines them: ``(name, default)``, ``inspect.Parameter.empty`` for none."""
CONSUMERS = ("swift.rlhf_trainers.grpo_trainer", "swift.megatron.trainers.grpo_trainer", "swift.ray.megatron.grpo_trainer")
"""ms-swift 4.6's modules that import the functions by name: its GRPOTrainer (transformers), Megatron's and Ray's."""


class SwiftSeamError(RuntimeError):
    """ms-swift does not offer what the seam relies on: the seam is not installed and nothing of ms-swift is changed."""


def installed_version() -> str | None:
    """The installed ms-swift release, or None."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return None


def _release(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+", 1)[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit()) if not piece.isdigit() else piece
        if not digits or digits != piece:
            if digits:
                parts.append(int(digits))
            break
        parts.append(int(digits))
    return tuple(parts)


def supported(text: str | None) -> bool:
    """Whether ms-swift ``text`` lies in :data:`SUPPORTED`."""
    if text is None:
        return False
    release = _release(text)
    low, high = (_release(bound.lstrip("<>=")) for bound in SUPPORTED)
    return low <= release[: len(low)] and release[: len(high)] < high


def signature_problems(module: ModuleType) -> list[str]:
    """What ``module`` (``swift.rl_core.advantage``) lacks or defines otherwise than :data:`SIGNATURES`; empty: the seam fits."""
    problems = []
    for name, expected in SIGNATURES.items():
        function = getattr(module, name, None)
        if not callable(function):
            problems.append(f"{ADVANTAGE_MODULE}.{name} is missing")
            continue
        function = inspect.unwrap(function)
        try:
            found = tuple((p.name, p.default) for p in inspect.signature(function).parameters.values())
        except (TypeError, ValueError):
            problems.append(f"{ADVANTAGE_MODULE}.{name} has no readable signature")
            continue
        if found != expected:
            problems.append(f"{ADVANTAGE_MODULE}.{name}{_shown(found)}, the seam expects {name}{_shown(expected)}")
    return problems


def _shown(parameters: tuple[tuple[str, Any], ...]) -> str:
    return "(" + ", ".join(name if default is _REQUIRED else f"{name}={default!r}" for name, default in parameters) + ")"
