"""Select reward shapers by name: ``register_reward_shaper`` and ``get_reward_shaper``.

Names are looked up in this order: registrations in user code, then the built-ins and installed plugins (hook
``rllm_reward_shapers`` under the entry-point group ``rllm_plugins``); the mechanism is every plugin kind's
(:class:`rllm_plugins.discovery.kinds.KindRegistry`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..discovery.kinds import KindRegistry
from ..shaper_spec import Shaper, ShaperSpec

__all__ = [
    "UnknownShaperError",
    "all_shapers",
    "available_shapers",
    "get_reward_shaper",
    "register_reward_shaper",
    "registry_version",
    "unregister_reward_shaper",
]


class UnknownShaperError(ValueError):
    """No reward shaper is registered under the name (or several plugins offer it)."""


_registry = KindRegistry(
    "reward shaper", "shapers", "shaper_conflicts", "shapers", Shaper, UnknownShaperError,
    "Register one with @rllm_plugins.register_reward_shaper or install a plugin that offers it.",
)  # fmt: skip


def register_reward_shaper(name: str, *, description: str = "", requires: tuple[str, ...] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register ``fn(rewards, **options)`` (additive terms, :mod:`rllm_plugins.shaper_spec`) as the reward shaper ``name``.

    In user code it may override a built-in or plugin name, with a warning naming both; inside a module loaded through
    the ``rllm_plugins`` entry point it registers for that plugin.
    """

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        _registry.add(ShaperSpec(name, fn, description=description, requires=requires), fn)
        return fn

    return decorator


def unregister_reward_shaper(name: str) -> None:
    """Remove a user-code registration; built-ins and plugins stay."""
    _registry.remove(name)


def registry_version() -> tuple[int, int]:
    """Changes when what a name resolves to may have changed (a registration or removal in user code, plugins reloaded):
    a caller that keeps resolved lists keys them with it."""
    return _registry.version()


def available_shapers() -> list[str]:
    """Every name that resolves to exactly one reward shaper, sorted."""
    return _registry.names()


def all_shapers() -> dict[str, Shaper]:
    """Every selectable reward shaper by name (user registrations over built-ins and plugins)."""
    return _registry.everything()


def get_reward_shaper(name: Any) -> Shaper:
    """The reward shaper registered under ``name``; ``UnknownShaperError`` lists the available names."""
    return _registry.get(name)
