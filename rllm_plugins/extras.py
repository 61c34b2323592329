"""Optional dependencies: say which extra to install when a module needs what the core does not bring."""

from __future__ import annotations

from collections.abc import Sequence
from importlib.util import find_spec

__all__ = ["missing_modules", "require_extra"]


def missing_modules(modules: Sequence[str]) -> list[str]:
    """The top-level ``modules`` that cannot be imported (looked up, never imported)."""
    missing = []
    for module in modules:
        try:
            found = find_spec(module) is not None
        except (ImportError, ValueError):  # a broken install, or a module without a spec
            found = False
        if not found:
            missing.append(module)
    return missing


def require_extra(who: str, extras: str | Sequence[str], modules: Sequence[str]) -> None:
    """Raise ``ModuleNotFoundError`` naming ``pip install "rllm-plugins[<extra>]"`` if any of ``modules`` is missing.

    ``extras``: the extra that brings ``modules``, or several that each do.
    """
    missing = missing_modules(modules)
    if missing:
        install = " or ".join(f'pip install "rllm-plugins[{extra}]"' for extra in ([extras] if isinstance(extras, str) else extras))
        verb = "is" if len(missing) == 1 else "are"
        raise ModuleNotFoundError(f"{who} needs {_listed(modules)}, and {_listed(missing)} {verb} not installed. Install: {install}", name=missing[0])


def _listed(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else names[0]
