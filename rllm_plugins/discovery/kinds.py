"""The user-code registrations of a plugin kind beside the estimators (advantage transforms, reward shapers): one mechanism.

A :class:`KindRegistry` keeps what user code registered under each name (it wins over built-ins and plugins, with a
warning naming both), counts the changes (a caller that keeps resolved lists keys them with :meth:`KindRegistry.version`),
and looks a name up through the one lookup of every plugin kind (:func:`rllm_plugins.discovery.unresolved.resolve`),
reading the plugins' offers from the manager's state attributes it is given.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Any

from ..spec import Provider
from . import manager
from .unresolved import resolve, unknown_message

__all__ = ["KindRegistry"]


class KindRegistry:
    """Registrations in user code of one plugin kind.

    ``kind``: its name in messages (``"advantage transform"``); ``offers`` / ``conflicts``: the manager state's attributes
    holding the plugins' offers and the names several of them offer; ``record_field``: what a plugin record lists of this
    kind; ``wrap(spec, provider)``: the registered object; ``error``: the exception class of a failed lookup; ``register``:
    the sentence that says how to add one.
    """

    def __init__(
        self, kind: str, offers: str, conflicts: str, record_field: str, wrap: Callable[[Any, Provider], Any], error: type[ValueError], register: str
    ) -> None:
        self.kind, self.offers, self.conflicts, self.record_field = kind, offers, conflicts, record_field
        self.wrap, self.error, self.register_hint = wrap, error, register
        self._lock = threading.Lock()
        self._user: dict[str, Any] = {}
        self._changes = 0  # registrations and removals in user code so far

    def add(self, spec: Any, fn: Callable[..., Any]) -> None:
        """Register ``spec`` (whose function is ``fn``) from user code, or for the plugin whose entry point is importing."""
        if manager.loading_provider() is not None:
            manager.capture(spec)
            return
        provider = Provider(f"{fn.__module__}.{fn.__qualname__}", kind="user")
        offered = getattr(manager.plugin_state(), self.offers)
        with self._lock:
            previous = self._user.get(spec.name) or offered.get(spec.name)
            self._user[spec.name] = self.wrap(spec, provider)
            self._changes += 1
        if previous is not None and previous.spec.fn is not fn:
            warnings.warn(f"{self.kind} {spec.name!r} from {provider} overrides the one from {previous.provider}", UserWarning, stacklevel=3)

    def remove(self, name: str) -> None:
        """Remove a user-code registration; built-ins and plugins stay."""
        with self._lock:
            if self._user.pop(name, None) is None:
                raise self.error(f"no {self.kind} {name!r} was registered in user code")
            self._changes += 1

    def version(self) -> tuple[int, int]:
        """Changes when what a name resolves to may have changed (a registration or removal in user code, plugins reloaded)."""
        return self._changes, id(manager.plugin_state())

    def everything(self) -> dict[str, Any]:
        """Every selectable one by name (user registrations over built-ins and plugins)."""
        return {**getattr(manager.plugin_state(), self.offers), **self._user}

    def names(self) -> list[str]:
        """Every name that resolves to exactly one, sorted."""
        return sorted(set(getattr(manager.plugin_state(), self.offers)) | set(self._user))

    def get(self, name: Any) -> Any:
        """The one registered under ``name``; ``self.error`` lists the available names (and a near typo)."""
        if not isinstance(name, str):
            raise self.error(f"a {self.kind} name must be a str, got {type(name).__name__}: {name!r}")
        key = name.strip().lower()
        state = manager.plugin_state()

        def unknown() -> ValueError:
            offered = lambda record: getattr(record, self.record_field)  # noqa: E731 - what a plugin record lists of this kind
            message = unknown_message(
                name, key, kind=self.kind, unknown=f"Unknown {self.kind}", names=self.names(), offered=offered, register=self.register_hint
            )
            return self.error(message)

        offers, conflicts = getattr(state, self.offers), getattr(state, self.conflicts)
        return resolve(key, self._user.get(key), offers, conflicts, kind=self.kind, conflict_error=self.error, unknown=unknown)
