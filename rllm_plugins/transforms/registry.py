"""Select advantage transforms by name: ``register_advantage_transform`` and ``get_transform``.

Names are looked up in this order: registrations in user code, then the built-ins and installed
plugins (hook ``rllm_advantage_transforms`` under the entry-point group ``rllm_plugins``).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Any, Literal

from ..discovery import manager
from ..discovery.unresolved import resolve, unknown_message
from ..spec import Provider
from ..transform_spec import Transform, TransformSpec

__all__ = [
    "UnknownTransformError",
    "all_transforms",
    "available_transforms",
    "get_transform",
    "register_advantage_transform",
    "registry_version",
    "unregister_advantage_transform",
]


class UnknownTransformError(ValueError):
    """No transform is registered under the name (or several plugins offer it)."""


_lock = threading.Lock()
_user: dict[str, Transform] = {}
_changes = 0  # registrations and removals in user code so far (a resolved list is reused while nothing changed)


def register_advantage_transform(
    name: str,
    *,
    description: str = "",
    level: Literal["sequence", "token"] = "sequence",
    elementwise: bool = False,
    requires: tuple[str, ...] = (),
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register ``fn(advantages, **options)`` as the advantage transform ``name``.

    In user code it may override a built-in or plugin name, with a warning naming both; inside a
    module loaded through the ``rllm_plugins`` entry point it registers for that plugin.
    """

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        spec = TransformSpec(name, fn, description=description, level=level, elementwise=elementwise, requires=requires)
        if manager.loading_provider() is not None:
            manager.capture(spec)
            return fn
        provider = Provider(f"{fn.__module__}.{fn.__qualname__}", kind="user")
        state = manager.plugin_state()
        global _changes
        with _lock:
            previous = _user.get(spec.name) or state.transforms.get(spec.name)
            _user[spec.name] = Transform(spec, provider)
            _changes += 1
        if previous is not None and previous.spec.fn is not fn:
            warnings.warn(f"advantage transform {spec.name!r} from {provider} overrides the one from {previous.provider}", UserWarning, stacklevel=2)
        return fn

    return decorator


def unregister_advantage_transform(name: str) -> None:
    """Remove a user-code registration; built-ins and plugins stay."""
    global _changes
    with _lock:
        if _user.pop(name, None) is None:
            raise UnknownTransformError(f"no advantage transform {name!r} was registered in user code")
        _changes += 1


def registry_version() -> tuple[int, int]:
    """Changes when what a name resolves to may have changed (a registration or removal in user code, plugins reloaded):
    a caller that keeps resolved lists keys them with it."""
    return _changes, id(manager.plugin_state())


def available_transforms() -> list[str]:
    """Every name that resolves to exactly one transform, sorted."""
    return sorted(set(manager.plugin_state().transforms) | set(_user))


def all_transforms() -> dict[str, Transform]:
    """Every selectable transform by name (user registrations over built-ins and plugins)."""
    return {**manager.plugin_state().transforms, **_user}


def get_transform(name: Any) -> Transform:
    """The transform registered under ``name``; ``UnknownTransformError`` lists the available names."""
    if not isinstance(name, str):
        raise UnknownTransformError(f"an advantage transform name must be a str, got {type(name).__name__}: {name!r}")
    key = name.strip().lower()
    state = manager.plugin_state()
    return resolve(
        key, _user.get(key), state.transforms, state.transform_conflicts, kind="advantage transform", conflict_error=UnknownTransformError,
        unknown=lambda: UnknownTransformError(_unknown_message(name, key)),
    )  # fmt: skip


def _unknown_message(name: str, key: str) -> str:
    return unknown_message(
        name,
        key,
        kind="advantage transform",
        unknown="Unknown advantage transform",
        names=available_transforms(),
        offered=lambda record: record.transforms,
        register="Register one with @rllm_plugins.register_advantage_transform or install a plugin that offers it.",
    )
