"""Entry points that never take effect because of a slip in them, found without importing anything.

Two slips install without complaint and leave a plugin silently missing:

* a **near-miss group name** (``[project.entry-points.rllm_plugin]``, ``rllm-plugins``,
  ``verl.plugin``): nothing reads that group, so the plugin is never loaded;
* a **target that does not exist** (``"my_pkg.plugn"``, ``"my_pkg.plugin:hooks"`` without
  ``hooks``): the import fails with ``No module named ...``, which does not say that the
  entry point itself is wrong.

Used on the paths that report problems (``rllm-plugins plugins``, unknown-name errors, load
errors); never when ``rllm_plugins`` is imported.
"""

from __future__ import annotations

import difflib
import re
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Any

__all__ = ["GROUPS", "MisplacedEntryPoint", "misplaced_entry_points", "near_miss_group", "target_mistake"]

# the entry-point groups read by rllm-plugins (and, for the verl adapter, by verl)
GROUPS = ("rllm_plugins", "rllm_plugins.commands", "verl.plugins")


def _normal(group: str) -> str:
    """``group`` without case, separators and a final ``s``: ``RLLM-Plugin`` and ``rllm_plugins`` are the same."""
    return re.sub(r"[^a-z0-9]", "", group.lower()).removesuffix("s")


def _at_most_one_edit(a: str, b: str) -> bool:
    """Whether ``a`` becomes ``b`` by at most one insertion, deletion, substitution or swap of neighbours."""
    if a == b:
        return True
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long = sorted((a, b), key=len)
    i = next((i for i, (x, y) in enumerate(zip(short, long, strict=False)) if x != y), len(short))
    return short[i:] == long[i + 1 :]


def near_miss_group(group: str) -> str | None:
    """The group of :data:`GROUPS` that ``group`` is a slip of (case, separators, plural, one typo); None for exact or unrelated groups.

    The first letter must match: ``vllm.plugins`` is another project's group, not a typo of ``rllm_plugins``.
    """
    if group in GROUPS:
        return None
    typed = _normal(group)
    return next((known for known in GROUPS if typed[:1] == known[:1] and _at_most_one_edit(typed, _normal(known))), None)


def _table(group: str) -> str:
    """The ``pyproject.toml`` table that declares entry points of ``group``."""
    return f"[project.entry-points.{group}]" if re.fullmatch(r"[A-Za-z0-9_-]+", group) else f'[project.entry-points."{group}"]'


@dataclass(frozen=True)
class MisplacedEntryPoint:
    """An entry point declared in a near-miss group: nothing loads it."""

    name: str
    value: str
    group: str
    intended: str
    distribution: str | None
    version: str | None

    def __str__(self) -> str:
        dist = f"distribution {self.distribution} {self.version}" if self.distribution else "an unknown distribution"
        return (
            f"{dist} declares the entry point {self.name} = {self.value!r} in the group {self.group!r}, which nothing reads, "
            f"so it is never loaded. Fix: in its pyproject.toml, rename {_table(self.group)} to {_table(self.intended)}, then reinstall it"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "group": self.group,
            "intended": self.intended,
            "distribution": self.distribution,
            "version": self.version,
            "error": str(self),
        }


def misplaced_entry_points(intended: str | None = None) -> list[MisplacedEntryPoint]:
    """Every installed entry point whose group is a near miss of one of :data:`GROUPS` (only of ``intended`` if given), sorted."""
    found: dict[tuple[Any, ...], MisplacedEntryPoint] = {}
    for dist in metadata.distributions():
        for ep in dist.entry_points:
            target = near_miss_group(ep.group)
            if target is None or (intended is not None and target != intended):
                continue
            name = dist.metadata["Name"]
            found.setdefault((name, ep.group, ep.name), MisplacedEntryPoint(ep.name, ep.value, ep.group, target, name, dist.version))
    return sorted(found.values(), key=lambda m: (m.name, m.distribution or ""))


def _modules_of(dist: metadata.Distribution | None) -> list[str]:
    """The dotted names of the Python modules a distribution installed."""
    modules = []
    for file in (dist.files or ()) if dist is not None else ():
        if file.suffix == ".py" and ".." not in file.parts and not file.parts[0].endswith((".dist-info", ".egg-info")):
            parts = list(file.with_suffix("").parts)
            modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


def _missing_attribute(ep: metadata.EntryPoint) -> str | None:
    """The first attribute of ``ep``'s ``module:attr`` path that its (imported) module lacks."""
    obj = sys.modules.get(ep.module)
    if obj is None or not ep.attr:
        return None
    for attr in ep.attr.split("."):
        if not hasattr(obj, attr):
            return attr
        obj = getattr(obj, attr)
    return None


def target_mistake(error: BaseException, ep: metadata.EntryPoint) -> str | None:
    """If ``error`` comes from ``ep`` naming a module or attribute that does not exist, say so and how to fix it; else None."""
    where = f"the entry point {ep.name} = {ep.value!r} (group {ep.group})" + (f" of distribution {ep.dist.name} {ep.dist.version}" if ep.dist else "")
    fix = "Fix the entry point in the distribution's pyproject.toml, then reinstall it"
    missing = getattr(error, "name", None)
    if isinstance(error, ModuleNotFoundError) and missing and (ep.module == missing or ep.module.startswith(f"{missing}.")):
        close = difflib.get_close_matches(ep.module, _modules_of(ep.dist), n=1, cutoff=0.6)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return f"{where} names the module {ep.module!r}, which does not exist.{hint} {fix}"
    if isinstance(error, AttributeError) and (attr := _missing_attribute(ep)) is not None:
        names = [n for n in dir(sys.modules[ep.module]) if not n.startswith("_")]
        close = difflib.get_close_matches(attr, names, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return f"{where} names {attr!r}, which the module {ep.module!r} does not define.{hint} {fix}"
    return None
