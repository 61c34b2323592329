"""Select reward shapers by name: ``register_reward_shaper`` and ``get_reward_shaper``.

Names are looked up in this order: registrations in user code, then the built-ins and installed plugins (hook
``rllm_reward_shapers`` under the entry-point group ``rllm_plugins``) — the lookup of every plugin kind
(:func:`rllm_plugins.discovery.unresolved.resolve`).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Any

from ..discovery import manager
from ..discovery.unresolved import resolve, unknown_message
from ..shaper_spec import Shaper, ShaperSpec
from ..spec import Provider

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


_lock = threading.Lock()
_user: dict[str, Shaper] = {}
_changes = 0  # registrations and removals in user code so far (a resolved list is reused while nothing changed)


def register_reward_shaper(name: str, *, description: str = "", requires: tuple[str, ...] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register ``fn(rewards, **options)`` (additive terms, :mod:`rllm_plugins.shaper_spec`) as the reward shaper ``name``.

    In user code it may override a built-in or plugin name, with a warning naming both; inside a module loaded through
    the ``rllm_plugins`` entry point it registers for that plugin.
    """

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        spec = ShaperSpec(name, fn, description=description, requires=requires)
        if manager.loading_provider() is not None:
            manager.capture(spec)
            return fn
        provider = Provider(f"{fn.__module__}.{fn.__qualname__}", kind="user")
        state = manager.plugin_state()
        global _changes
        with _lock:
            previous = _user.get(spec.name) or state.shapers.get(spec.name)
            _user[spec.name] = Shaper(spec, provider)
            _changes += 1
        if previous is not None and previous.spec.fn is not fn:
            warnings.warn(f"reward shaper {spec.name!r} from {provider} overrides the one from {previous.provider}", UserWarning, stacklevel=2)
        return fn

    return decorator


def unregister_reward_shaper(name: str) -> None:
    """Remove a user-code registration; built-ins and plugins stay."""
    global _changes
    with _lock:
        if _user.pop(name, None) is None:
            raise UnknownShaperError(f"no reward shaper {name!r} was registered in user code")
        _changes += 1


def registry_version() -> tuple[int, int]:
    """Changes when what a name resolves to may have changed (a registration or removal in user code, plugins reloaded):
    a caller that keeps resolved lists keys them with it."""
    return _changes, id(manager.plugin_state())


def available_shapers() -> list[str]:
    """Every name that resolves to exactly one reward shaper, sorted."""
    return sorted(set(manager.plugin_state().shapers) | set(_user))


def all_shapers() -> dict[str, Shaper]:
    """Every selectable reward shaper by name (user registrations over built-ins and plugins)."""
    return {**manager.plugin_state().shapers, **_user}


def get_reward_shaper(name: Any) -> Shaper:
    """The reward shaper registered under ``name``; ``UnknownShaperError`` lists the available names."""
    if not isinstance(name, str):
        raise UnknownShaperError(f"a reward shaper name must be a str, got {type(name).__name__}: {name!r}")
    key = name.strip().lower()
    state = manager.plugin_state()
    return resolve(
        key, _user.get(key), state.shapers, state.shaper_conflicts, kind="reward shaper", conflict_error=UnknownShaperError,
        unknown=lambda: UnknownShaperError(unknown_message(
            name, key, kind="reward shaper", unknown="Unknown reward shaper", names=available_shapers(), offered=lambda record: record.shapers,
            register="Register one with @rllm_plugins.register_reward_shaper or install a plugin that offers it.",
        )),
    )  # fmt: skip
