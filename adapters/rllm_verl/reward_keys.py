"""Let the ``rllm_*`` estimators read the batch's per-key reward scores (``algorithm.gdpo_reward_keys``).

verl's ``compute_advantage`` (``verl.trainer.ppo.ray_trainer``) hands ``non_tensor_batch``, where
the legacy trainer keeps the extra keys a ``compute_score`` returns, only to the estimator named
``gdpo``. This module wraps that function so that, while it runs, the DataProto it was given is
visible to our estimators through a context variable (:func:`current_non_tensor_batch`). The
original function is then called with the same arguments, so every estimator, ours included,
receives exactly the keyword arguments verl gives it; nothing else changes.

The extension is guarded:

- installed once, from the ``verl.plugins`` entry point, without importing the trainer module
  (about 1.5 s and a page of warnings in every verl process): an import hook applies it right
  after verl imports ``verl.trainer.ppo.ray_trainer``, before any module binds the name;
- applied only if ``compute_advantage`` has verl 0.9's parameters; otherwise one warning and
  verl is left untouched;
- idempotent, and never raises (a failure is logged as a warning);
- ``RLLM_VERL_EXTEND_COMPUTE_ADVANTAGE=0`` turns it off.
"""

from __future__ import annotations

import contextvars
import functools
import importlib.abc
import inspect
import logging
import os
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["EXPECTED_PARAMETERS", "OPT_OUT_ENV", "TARGET_MODULE", "current_non_tensor_batch", "extend_compute_advantage", "extension_state", "install"]

OPT_OUT_ENV = "RLLM_VERL_EXTEND_COMPUTE_ADVANTAGE"
TARGET_MODULE = "verl.trainer.ppo.ray_trainer"
EXPECTED_PARAMETERS = ("data", "adv_estimator", "gamma", "lam", "num_repeat", "norm_adv_by_std_in_grpo", "config")
_BINDERS = ("verl.trainer.ppo.v1.utils", "verl.experimental.separation.ray_trainer")  # modules that import the name

logger = logging.getLogger(__name__)

_batch: contextvars.ContextVar[Any] = contextvars.ContextVar("rllm_verl_batch", default=None)
_lock = threading.Lock()
_state = "not installed"


def extension_state() -> str:
    """``"active"``, ``"pending"`` (trainer module not imported yet), ``"disabled"`` (opt-out), ``"not installed"`` or why it was skipped."""
    return _state


def current_non_tensor_batch(index: Any) -> dict[str, Any] | None:
    """The ``non_tensor_batch`` of the DataProto that ``compute_advantage`` is processing, if ``index`` is its ``uid`` array."""
    data = _batch.get()
    if data is None:
        return None
    non_tensor = getattr(data, "non_tensor_batch", None)
    if not isinstance(non_tensor, dict) or non_tensor.get("uid") is not index:
        return None
    return non_tensor


def _wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def compute_advantage(data: Any, *args: Any, **kwargs: Any) -> Any:
        token = _batch.set(data)
        try:
            return original(data, *args, **kwargs)
        finally:
            _batch.reset(token)

    compute_advantage.rllm_original = original  # type: ignore[attr-defined]
    return compute_advantage


def extend_compute_advantage(module: ModuleType) -> bool:
    """Wrap ``module.compute_advantage`` (and the modules that bound it) if its signature is verl 0.9's; True when active."""
    global _state
    with _lock:
        current = getattr(module, "compute_advantage", None)
        if current is None:
            _state = f"skipped: {module.__name__} has no compute_advantage"
            logger.warning("rllm-plugins: %s has no compute_advantage; algorithm.gdpo_reward_keys will not reach rllm_* estimators", module.__name__)
            return False
        if hasattr(current, "rllm_original"):
            _state = "active"
            return True
        try:
            found = tuple(inspect.signature(current).parameters)
        except (TypeError, ValueError):
            found = None
        if found != EXPECTED_PARAMETERS:
            _state = f"skipped: compute_advantage takes {found}"
            logger.warning(
                "rllm-plugins: verl's compute_advantage takes %s, not %s; left untouched, so algorithm.gdpo_reward_keys will not reach rllm_* estimators",
                found,
                EXPECTED_PARAMETERS,
            )
            return False
        wrapped = _wrap(current)
        module.compute_advantage = wrapped  # type: ignore[attr-defined]
        for name in _BINDERS:
            binder = sys.modules.get(name)
            if binder is not None and getattr(binder, "compute_advantage", None) is current:
                binder.compute_advantage = wrapped  # type: ignore[attr-defined]
        _state = "active"
        return True


class _Loader(importlib.abc.Loader):
    """The target module's own loader, extended once the module has run."""

    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec: Any) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        _remove_finder()
        try:
            extend_compute_advantage(module)
        except Exception as error:  # never break verl's import
            logger.warning("rllm-plugins: could not extend verl's compute_advantage: %s: %s", type(error).__name__, error)

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, ...: the inner loader's
        if name == "_inner":
            raise AttributeError(name)
        return getattr(self._inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: asks the other finders for the target module and wraps its loader."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != TARGET_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


_finder = _Finder()


def _remove_finder() -> None:
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)


def install() -> str:
    """Extend ``compute_advantage`` now if verl's trainer module is imported, else when it is; returns :func:`extension_state`."""
    global _state
    try:
        if os.environ.get(OPT_OUT_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
            _state = "disabled"
            return _state
        module = sys.modules.get(TARGET_MODULE)
        if module is not None:
            extend_compute_advantage(module)
        elif _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
            _state = "pending"
    except Exception as error:  # never break verl's import
        _state = f"skipped: {type(error).__name__}: {error}"
        logger.warning("rllm-plugins: could not extend verl's compute_advantage: %s: %s", type(error).__name__, error)
    return _state
