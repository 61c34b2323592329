"""Guarded extension of one verl function where verl offers no hook.

An :class:`Extension` names a function (``module.attribute``; ``Class.method`` for a method), the exact
signature it was written for, the feature of verl it relies on (``requires``: a flag of
:class:`rllm_verl.versions.VerlFeatures`, e.g. ``v1_trainer``; on a release without it the extension is not
installed), the modules that bound the name by ``from module import attribute``, an opt-out environment
variable (``RLLM_PLUGINS_VERL_<NAME>``), and ``make(original) -> replacement``. The extensions (in
:mod:`rllm_verl.patches`): ``sessions.SESSIONS``, ``legacy.REWARD_KEYS``, ``v1.V1_BATCH``, ``sync_trainer.SYNC_TRAINER``
and ``checkpoints.CHECKPOINTS``, installed by :mod:`rllm_verl.plugin`. :func:`install` applies it:

- lazily: if the module is not imported yet, a finder on ``sys.meta_path`` applies it right after
  the module first executes (so ``import verl`` stays as cheap as before, and a later
  ``from module import attribute`` binds the replacement);
- once and idempotently (the replacement carries ``rllm_extension``; applying again is a no-op);
- only when the function's signature is the expected one, checked at run time; otherwise it
  warns once and leaves verl untouched;
- never raising: a failure is logged as one warning, and verl keeps its own function;
- only on a verl release that has what it ``requires`` (:mod:`rllm_verl.versions`), else its status says which release lacks what;
- for a module-level function that verl moves between releases (``defined_in``: the other modules that define it on some
  release; ``follow=True``): applied when any of those modules is imported, in the module that DEFINES the function
  (its ``__module__``), and in every imported module that bound it by name (``from module import attribute``), so a
  re-export and a later import both see the replacement.

:func:`extension_status` says, per extension, whether it is active.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import inspect
import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

__all__ = ["ADVANTAGE_PARAMETERS", "NO_DEFAULT", "Extension", "extension_status", "install", "is_opted_out", "missing_feature", "where_defined"]

logger = logging.getLogger(__name__)

_OFF = {"0", "false", "no", "off"}
_lock = threading.RLock()
_status: dict[str, str] = {}
_warned: set[tuple[str, str]] = set()

NO_DEFAULT = inspect.Parameter.empty
# the parameters verl's advantage functions share after their batch argument(s): compute_advantage's and
# compute_advantage_for_multi_trajectories'
ADVANTAGE_PARAMETERS: tuple[tuple[str, Any], ...] = (
    ("adv_estimator", NO_DEFAULT),
    ("gamma", 1.0),
    ("lam", 1.0),
    ("num_repeat", 1),
    ("norm_adv_by_std_in_grpo", True),
    ("config", None),
)


@dataclass(frozen=True)
class Extension:
    """What to extend and how. ``parameters``: ``(name, default)`` per parameter, ``inspect.Parameter.empty`` for none."""

    name: str
    module: str
    attribute: str
    parameters: tuple[tuple[str, Any], ...]
    make: Callable[[Callable[..., Any]], Callable[..., Any]]
    env: str
    bound_in: tuple[str, ...] = ()
    requires: str | None = None
    defined_in: tuple[str, ...] = ()
    """Other modules where a verl release defines ``attribute`` (the extension also applies when one of them is imported)."""
    follow: bool = False
    """Replace the function where it is defined and in every imported module bound to it (a module-level function only)."""

    @property
    def modules(self) -> tuple[str, ...]:
        """The modules whose import applies the extension: ``module``, then ``defined_in``."""
        return (self.module, *self.defined_in)

    @property
    def target(self) -> str:
        return f"{self.module}.{self.attribute}"


def missing_feature(extension: Extension) -> str | None:
    """Why the installed verl lacks what ``extension.requires`` (None when it has it, or when nothing is required)."""
    if extension.requires is None:
        return None
    from rllm_verl.versions import FEATURE_TEXT, verl_features

    features = verl_features()
    if getattr(features, extension.requires):
        return None
    return f"absent: verl {features.version} has no {FEATURE_TEXT[extension.requires]}"


def is_opted_out(extension: Extension) -> bool:
    """Whether ``extension.env`` is set to 0 / false / no / off."""
    return os.environ.get(extension.env, "").strip().lower() in _OFF


def extension_status() -> dict[str, str]:
    """Per installed extension: ``active``, ``pending (...)``, ``off (...)`` or ``not applied: <why>``."""
    with _lock:
        return dict(_status)


def _warn_once(extension: Extension, message: str) -> None:
    key = (extension.name, message)
    if key not in _warned:
        _warned.add(key)
        logger.warning("rllm-plugins: %s extension of %s not applied: %s", extension.name, extension.target, message)


def _signature_mismatch(extension: Extension, fn: Any) -> str | None:
    """Why ``fn``'s signature is not the expected one (None when it is)."""
    try:
        parameters = list(inspect.signature(fn, follow_wrapped=False).parameters.values())
    except (TypeError, ValueError) as error:
        return f"its signature cannot be read ({error})"
    found = tuple((p.name, p.default) for p in parameters)
    kinds_ok = all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters)
    if found != extension.parameters or not kinds_ok:
        expected = ", ".join(n if d is inspect.Parameter.empty else f"{n}={d!r}" for n, d in extension.parameters)
        found_text = inspect.signature(fn, follow_wrapped=False)
        return f"its signature is {found_text}, this version of rllm-plugins supports ({expected}); verl's own function is used"
    return None


def _owner(module: ModuleType, attribute: str) -> tuple[Any, str]:
    """The object holding ``attribute`` (the module, or the class of ``Class.method``) and the last name; ``(None, name)`` when absent."""
    *path, last = attribute.split(".")
    owner: Any = module
    for part in path:
        owner = getattr(owner, part, None)
    return owner, last


def _apply(extension: Extension, module: ModuleType) -> None:
    """Replace ``module.attribute`` (and the names bound to it in ``bound_in``) by the extension, if it fits."""
    with _lock:
        try:
            owner, last = _owner(module, extension.attribute)
            original = getattr(owner, last, None) if owner is not None else None
            if original is None and module.__name__ != extension.module:
                return  # a module where another release defines it: this one does not, the main module decides
            if original is None:
                _status[extension.name] = "not applied: verl has no such function"
                _warn_once(extension, f"{extension.module} has no {extension.attribute!r}")
                return
            if getattr(original, "rllm_extension", None) == extension.name:
                replacement = original
            else:
                why = _signature_mismatch(extension, original)
                if why is not None:
                    _status[extension.name] = f"not applied: {why}"
                    _warn_once(extension, why)
                    return
                replacement = extension.make(original)
                replacement.rllm_extension = extension.name  # type: ignore[attr-defined]
                replacement.__wrapped__ = original  # type: ignore[attr-defined]
                setattr(owner, last, replacement)
            wrapped = replacement.__wrapped__
            for name in extension.bound_in:
                other = sys.modules.get(name)
                if other is not None and getattr(other, extension.attribute, None) is wrapped:
                    setattr(other, extension.attribute, replacement)
            if extension.follow:
                _rebind_everywhere(extension.attribute, wrapped, replacement)
            _status[extension.name] = "active"
        except Exception as error:  # verl hides plugin errors; never break its import
            _status[extension.name] = f"not applied: {type(error).__name__}: {error}"
            _warn_once(extension, f"{type(error).__name__}: {error}")


def _rebind_everywhere(attribute: str, original: Any, replacement: Any) -> None:
    """Bind ``replacement`` wherever an imported module binds ``original`` under ``attribute``: the module that defines it
    (``original.__module__``) and each ``from ... import attribute`` done so far; later imports find the replacement there."""
    for other in list(sys.modules.values()):
        namespace = getattr(other, "__dict__", None)
        if isinstance(namespace, dict) and namespace.get(attribute) is original:
            setattr(other, attribute, replacement)


def where_defined(extension: Extension) -> str | None:
    """The module that defines the function ``extension`` extends (its ``__module__``, under the replacement), if imported."""
    for name in extension.modules:
        module = sys.modules.get(name)
        fn = getattr(module, extension.attribute, None) if module is not None else None
        if fn is not None:
            return getattr(getattr(fn, "__wrapped__", fn), "__module__", None)
    return None


class _ApplyAfterExec(importlib.abc.Loader):
    """The module's own loader, then the extensions applied to the fresh module."""

    def __init__(self, loader: Any, extensions: list[Extension]) -> None:
        self._loader = loader
        self._extensions = extensions

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        for extension in self._extensions:
            _apply(extension, module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_resource_reader, is_package, ...
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of the modules that have pending extensions."""

    def __init__(self) -> None:
        self.extensions: dict[str, list[Extension]] = {}
        self._busy = threading.local()  # a finder that asks every finder, us included, must not recurse

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        extensions = self.extensions.get(fullname)
        if not extensions or getattr(self._busy, "name", None) == fullname:
            return None
        self._busy.name = fullname
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
            if spec.loader is not None and hasattr(spec.loader, "exec_module") and not isinstance(spec.loader, _ApplyAfterExec):
                spec.loader = _ApplyAfterExec(spec.loader, list(extensions))
            return spec
        except Exception as error:  # never break an import: let the normal finders do it
            for extension in extensions:
                _warn_once(extension, f"the import hook failed: {type(error).__name__}: {error}")
            return None
        finally:
            self._busy.name = None


_finder = _Finder()


def install(extension: Extension) -> str:
    """Apply ``extension`` now if its module is imported, else when it is; returns its status. Never raises."""
    with _lock:
        try:
            missing = missing_feature(extension)
            if missing is not None:
                _status[extension.name] = missing
                return missing
            if is_opted_out(extension):
                _status[extension.name] = f"off ({extension.env}={os.environ.get(extension.env)})"
                return _status[extension.name]
            imported = [sys.modules[name] for name in extension.modules if sys.modules.get(name) is not None]
            for name in extension.modules:  # a module imported later applies it too (another release may define it there)
                if sys.modules.get(name) is None:
                    pending = _finder.extensions.setdefault(name, [])
                    if all(e.name != extension.name for e in pending):
                        pending.append(extension)
            if _finder.extensions and _finder not in sys.meta_path:
                sys.meta_path.insert(0, _finder)
            _status[extension.name] = f"pending (applied when {' or '.join(extension.modules)} is imported)"
            for module in imported:
                _apply(extension, module)
            return _status[extension.name]
        except Exception as error:
            _status[extension.name] = f"not applied: {type(error).__name__}: {error}"
            _warn_once(extension, f"{type(error).__name__}: {error}")
            return _status[extension.name]
