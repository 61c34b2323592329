"""A configuration's list of reward shapers, resolved and checked at config time.

An entry is ``"name"``, ``("name", {options})`` or ``{"name": ..., **options}`` (the transforms' forms); a JSON
string holding such a list is read too (command lines). Unknown names, unknown or missing options and option values
a shaper refuses raise ``ValueError`` naming the entry, before any training step.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import set_shaper_resolver
from ..shaper_spec import Shaper, shaper_context, shaper_options
from ..transforms.entries import entry_list, split_entry
from .registry import get_reward_shaper
from .terms import shape_selected

__all__ = ["SelectedShaper", "check_shaper_context", "resolve_shapers", "trial_shaper_context"]

_EMPTY = inspect.Parameter.empty


@dataclass(frozen=True)
class SelectedShaper:
    """One entry of the list: the shaper, its options, and its label in the metrics (``name``, ``name#2`` when repeated)."""

    shaper: Shaper
    options: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""

    @property
    def name(self) -> str:
        return self.shaper.spec.name

    @property
    def who(self) -> str:
        return f"reward shaper {self.label or self.name!r} ({self.shaper.provider})"


def trial_shaper_context() -> dict[str, Any]:
    """A small input of every per-unit context keyword and ``offsets``, for the config-time trial call (two groups of two units)."""
    return {
        "offsets": np.array([0, 2, 4]),
        "scores": np.array([1.0, 0.0, 0.5, 0.25]),
        "lengths": np.array([3.0, 5.0, 2.0, 4.0]),
        "input_lengths": np.array([4.0, 4.0, 6.0, 6.0]),
        "tool_lengths": np.array([0.0, 2.0, 0.0, 1.0]),
        "turns": np.array([1.0, 2.0, 1.0, 3.0]),
    }


def resolve_shapers(entries: Any, where: str, *, trial: bool = True) -> tuple[SelectedShaper, ...]:
    """The shapers ``entries`` selects, checked: names known, options known and given, each tried once on a small input (``trial``)."""
    if entries is None:
        return ()
    selected: list[SelectedShaper] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entry_list(entries, where, "reward shaper")):
        here = f"{where}[{i}]"
        name, options = split_entry(entry, here, "reward shaper")
        try:
            shaper = get_reward_shaper(name)
        except ValueError as e:
            raise ValueError(f"{here}: {e}") from None
        known = shaper_options(shaper.spec)
        unknown = sorted(set(options) - set(known))
        if unknown:
            import difflib  # only on this error path

            close = {k: difflib.get_close_matches(k, list(known), n=1, cutoff=0.6) for k in unknown}
            hints = "".join(f" Did you mean {m[0]!r} for {k!r}?" for k, m in close.items() if m)
            raise ValueError(
                f"{here}: reward shaper {shaper.spec.name!r} ({shaper.provider}) has no option(s) {unknown}; "
                f"its options: {', '.join(known) if known else 'none'}.{hints}"
            )
        missing = sorted(k for k, default in known.items() if default is _EMPTY and k not in options)
        if missing:
            raise ValueError(f"{here}: reward shaper {shaper.spec.name!r} ({shaper.provider}) needs the option(s) {missing}; its options: {', '.join(known)}")
        seen[shaper.spec.name] = seen.get(shaper.spec.name, 0) + 1
        label = shaper.spec.name if seen[shaper.spec.name] == 1 else f"{shaper.spec.name}#{seen[shaper.spec.name]}"
        choice = SelectedShaper(shaper, dict(options), label)
        if trial:
            try:  # the one call every path makes, on a small input
                shape_selected(np.array([1.0, 0.0, 0.5, 0.25]), [choice], role="all_groups", **trial_shaper_context())
            except ValueError as e:
                raise ValueError(f"{here}: fails on a small input with the options {dict(options)}: {e}") from None
        selected.append(choice)
    return tuple(selected)


def check_shaper_context(selected: Sequence[SelectedShaper], available: set[str], where: str, framework: str) -> None:
    """Refuse, at config time, a shaper that requires (or names without a default) a context keyword ``framework`` cannot give."""
    for choice in selected:
        spec = choice.shaper.spec
        try:
            defaults = {p.name for p in inspect.signature(spec.fn).parameters.values() if p.default is not _EMPTY}
        except (TypeError, ValueError):
            defaults = set()
        needed = set(spec.requires) | (shaper_context(spec) - defaults)
        missing = sorted(k for k in needed if k not in available and k != "role")
        if missing:
            raise ValueError(
                f"{where}: {choice.who} needs {missing}, which {framework} does not provide here (it provides: {', '.join(sorted(available)) or 'nothing'})"
            )


set_shaper_resolver(resolve_shapers)
