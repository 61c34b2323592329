"""Old import paths of modules that moved: ``import old.name`` gives the module at its new path, with a DeprecationWarning.

A package calls :func:`keep_old_paths` once in its ``__init__`` with ``{old submodule: new submodule}``; the
finder it installs answers only for those names, and hands back the very module object of the new path (so
attributes, monkeypatches and ``isinstance`` checks agree between both names).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Mapping, Sequence
from types import ModuleType

__all__ = ["keep_old_paths"]


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, package: str, moved: Mapping[str, str]) -> None:
        self.targets = {f"{package}.{old}": f"{package}.{new}" for old, new in moved.items()}

    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname in self.targets else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # a placeholder; exec_module puts the real module in its place

    def exec_module(self, module: ModuleType) -> None:
        new = self.targets[module.__name__]
        warnings.warn(f"{module.__name__} moved to {new}; import it from there", DeprecationWarning, stacklevel=2)
        # the import system returns what sys.modules holds under the old name once this returns
        sys.modules[module.__name__] = importlib.import_module(new)


def keep_old_paths(package: str, moved: Mapping[str, str]) -> None:
    """Let ``import <package>.<old>`` keep working for each ``old -> new`` of ``moved`` (idempotent)."""
    if not any(isinstance(finder, _OldPaths) and set(finder.targets) == {f"{package}.{old}" for old in moved} for finder in sys.meta_path):
        sys.meta_path.append(_OldPaths(package, moved))
