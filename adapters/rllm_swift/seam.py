"""The seam: the only module that changes ms-swift.

:func:`install` replaces ``swift.rl_core.advantage.compute_advantages`` and ``compute_advantages_dynamic`` (ms-swift's
two advantage functions: its grouped mode and its request-aware multi-turn mode) by functions that run the selected
rllm-plugins estimator (:mod:`rllm_swift.compute`), in ms-swift's module and in every ms-swift module already imported
that bound them by name (:data:`rllm_swift.versions.CONSUMERS`; a module imported later binds the replacement). It is:

- guarded: it installs only when both functions have the parameters :data:`rllm_swift.versions.SIGNATURES` lists, and
  otherwise raises :class:`~rllm_swift.versions.SwiftSeamError` naming each difference, changing nothing; an ms-swift
  outside :data:`~rllm_swift.versions.SUPPORTED` whose functions match gets a warning naming the tested range;
- idempotent: a second call replaces the selection and patches nothing again;
- refusable: with ``RLLM_SWIFT_DISABLE=1`` it changes nothing and ms-swift computes its own advantages;
- reversible: :func:`uninstall` puts ms-swift's functions back wherever the seam put its own.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

from . import compute
from .compute import Selection
from .versions import ADVANTAGE_MODULE, DISTRIBUTION, FUNCTIONS, SUPPORTED, SwiftSeamError, installed_version, signature_problems, supported

__all__ = ["OPT_OUT", "current", "install", "installed", "uninstall"]

OPT_OUT = "RLLM_SWIFT_DISABLE"
"""``RLLM_SWIFT_DISABLE=1``: the seam installs nothing; ms-swift computes its own advantages."""
MARK = "__rllm_swift__"  # set on the replacements: the name of the ms-swift function each replaces
_LOG = logging.getLogger("rllm_swift")
_originals: dict[str, Callable[..., Any]] = {}
_selection: Selection | None = None


def opted_out() -> bool:
    return os.environ.get(OPT_OUT, "").strip().lower() in ("1", "true", "yes", "on")


def current() -> Selection | None:
    """The selection the seam runs, or None when it is not installed."""
    return _selection if _originals else None


def installed() -> bool:
    """Whether ms-swift's functions are replaced now."""
    module = sys.modules.get(ADVANTAGE_MODULE)
    return module is not None and all(getattr(getattr(module, name, None), MARK, None) == name for name in FUNCTIONS)


def _replacement(name: str) -> Callable[..., Any]:
    original = _originals[name]
    run = compute.grouped if name == "compute_advantages" else compute.request_aware

    @functools.wraps(original)
    def replacement(*args: Any, **kwargs: Any) -> Any:
        selection = _selection
        if selection is None:  # uninstalled while a reference was held
            return original(*args, **kwargs)
        return run(selection, *args, **kwargs)

    setattr(replacement, MARK, name)
    return replacement


def _rebind(old: Callable[..., Any], new: Callable[..., Any], name: str) -> list[str]:
    """``new`` in place of ``old`` under ``name`` in every loaded ms-swift module that holds ``old``; the modules' names."""
    changed = []
    for module_name, module in list(sys.modules.items()):
        if (module_name == "swift" or module_name.startswith("swift.")) and module is not None and getattr(module, name, None) is old:
            setattr(module, name, new)
            changed.append(module_name)
    return changed


def install(selection: Selection) -> bool:
    """Run ``selection`` in place of ms-swift's estimator in both of ms-swift's advantage functions; True when installed.

    False (nothing changed) with ``RLLM_SWIFT_DISABLE=1``. Raises :class:`SwiftSeamError` when ms-swift's functions are
    not those the seam was written for.
    """
    global _selection
    if opted_out():
        _LOG.warning("rllm-plugins: %s=1: ms-swift computes its own advantages; %s is not used", OPT_OUT, selection.describe())
        return False
    module = importlib.import_module(ADVANTAGE_MODULE)
    if not _originals:
        problems = signature_problems(module)
        if problems:
            raise SwiftSeamError(
                f"rllm-plugins cannot select estimators in {DISTRIBUTION} {installed_version()} (tested: {DISTRIBUTION}{','.join(SUPPORTED)}): "
                + "; ".join(problems)
                + f". Nothing was changed; set {OPT_OUT}=1 and leave rllm-plugins out of --external_plugins to train with ms-swift's own estimators"
            )
        found = installed_version()
        if not supported(found):
            warnings.warn(
                f"rllm-plugins: {DISTRIBUTION} {found} is outside the tested range {DISTRIBUTION}{','.join(SUPPORTED)}; its advantage functions "
                "match the ones the seam was written for, so the seam is installed",
                RuntimeWarning,
                stacklevel=2,
            )
        for name in FUNCTIONS:
            _originals[name] = getattr(module, name)
        _selection = selection
        for name in FUNCTIONS:
            _rebind(_originals[name], _replacement(name), name)
    else:
        _selection = selection
    _LOG.warning("rllm-plugins: ms-swift's %s run %s", " and ".join(FUNCTIONS), selection.describe())
    return True


def uninstall() -> None:
    """ms-swift's own functions back in every module the seam changed (those imported since included)."""
    global _selection
    module = sys.modules.get(ADVANTAGE_MODULE)
    if not _originals or module is None:
        return
    for name in FUNCTIONS:
        _rebind(getattr(module, name), _originals[name], name)
    _originals.clear()
    _selection = None
