"""Select advantage transforms by name: ``register_advantage_transform`` and ``get_transform``.

Names are looked up in this order: registrations in user code, then the built-ins and installed
plugins (hook ``rllm_advantage_transforms`` under the entry-point group ``rllm_plugins``); the mechanism
is every plugin kind's (:class:`rllm_plugins.discovery.kinds.KindRegistry`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from ..discovery.kinds import KindRegistry
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


_registry = KindRegistry(
    "advantage transform", "transforms", "transform_conflicts", "transforms", Transform, UnknownTransformError,
    "Register one with @rllm_plugins.register_advantage_transform or install a plugin that offers it.",
)  # fmt: skip


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
        _registry.add(TransformSpec(name, fn, description=description, level=level, elementwise=elementwise, requires=requires), fn)
        return fn

    return decorator


def unregister_advantage_transform(name: str) -> None:
    """Remove a user-code registration; built-ins and plugins stay."""
    _registry.remove(name)


def registry_version() -> tuple[int, int]:
    """Changes when what a name resolves to may have changed (a registration or removal in user code, plugins reloaded):
    a caller that keeps resolved lists keys them with it."""
    return _registry.version()


def available_transforms() -> list[str]:
    """Every name that resolves to exactly one transform, sorted."""
    return _registry.names()


def all_transforms() -> dict[str, Transform]:
    """Every selectable transform by name (user registrations over built-ins and plugins)."""
    return _registry.everything()


def get_transform(name: Any) -> Transform:
    """The transform registered under ``name``; ``UnknownTransformError`` lists the available names."""
    return _registry.get(name)
