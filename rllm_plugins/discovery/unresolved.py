"""One lookup for every plugin kind (estimators, advantage transforms), and why a name resolves to no single one.

:func:`resolve` is the lookup order of every kind: a registration in user code, else an error when several installed
plugins offer the name (:func:`conflict_message`), else the plugin's, else an error when none does
(:func:`unknown_message`: a plugin that did not load or is disabled, an entry point in a misspelt group, a near-typo of
an available name). A new plugin kind calls it with its own maps and words.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from ..spec import Provider
from . import manager
from .manager import PluginRecord

__all__ = ["conflict_message", "failed_to_load", "near_typo_hint", "resolve", "unavailable_because", "unknown_message"]

T = TypeVar("T")


def resolve(
    key: str,
    user: T | None,
    plugins: Mapping[str, T],
    conflicts: Mapping[str, Sequence[Provider]],
    *,
    kind: str,
    conflict_error: Callable[[str], Exception],
    unknown: Callable[[], Exception],
) -> T:
    """What the normalised name ``key`` selects of one plugin kind (``kind``: ``"estimator"``, ``"advantage transform"``).

    ``user``: a registration in user code under ``key`` (it overrides, with the warning given when it was made);
    ``plugins``: the installed plugins' offers by name; ``conflicts``: the names several of them offer. Raises
    ``conflict_error(message)`` for a conflict and ``unknown()`` when nothing offers ``key``.
    """
    if user is not None:
        return user
    if key in conflicts:
        raise conflict_error(conflict_message(kind, key, conflicts[key]))
    found = plugins.get(key)
    if found is not None:
        return found
    raise unknown()


def unavailable_because(key: str) -> str | None:
    """Why the name ``key`` may resolve to nothing because of a plugin that did not load, or None if all loaded.

    The plugin whose entry-point name is ``key`` (the usual convention) is named alone; otherwise
    every plugin that failed to load or is disabled is listed, since any of them may offer ``key``.
    """
    unavailable = [r for r in manager.plugin_state().records if r.why_unavailable() is not None]
    namesake = next((r for r in unavailable if r.name == key), None)
    if namesake is not None:
        fix = "Fix or uninstall it" if namesake.status == "error" else f"Remove {key!r} from {manager.DISABLE_ENV} to use it"
        return f"{namesake.why_unavailable()}. {fix} (`rllm-plugins plugins` shows every plugin's status)."
    if not unavailable:
        return None
    return "Plugins that did not load, which may offer it: " + "; ".join(str(r.why_unavailable()) for r in unavailable) + "."


def failed_to_load() -> bool:
    """Whether a plugin failed to load (one disabled on purpose does not count)."""
    return any(r.status == "error" for r in manager.plugin_state().records)


def near_typo_hint(key: str, names: Sequence[str], narrowed: bool) -> str:
    """`` Did you mean 'x'?`` for the name of ``names`` closest to ``key``, or ``""``. ``narrowed``: a plugin that failed to load
    (or an entry point in a misspelt group) may offer ``key``, so only a near-typo is worth suggesting."""
    import difflib  # only on error paths

    close = difflib.get_close_matches(key, list(names), n=1, cutoff=0.85 if narrowed else 0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def conflict_message(kind: str, key: str, providers: Sequence[Provider]) -> str:
    """``kind`` (e.g. ``"estimator"``) ``key`` offered by every one of ``providers``, and how to keep one."""
    names = ",".join(p.plugin for p in providers)
    return (
        f"{kind} {key!r} is offered by {len(providers)} installed plugins: {'; '.join(map(str, providers))}. "
        f"Uninstall one, or disable one with {manager.DISABLE_ENV}=<entry-point name> (one of: {names})."
    )


def unknown_message(
    name: Any,
    key: str,
    *,
    kind: str,
    unknown: str,
    names: Sequence[str],
    offered: Callable[[PluginRecord], Sequence[str]],
    register: str,
    hint: str = "",
) -> str:
    """The message for ``name`` (normalised: ``key``), of which no ``kind`` (``"estimator"``) is registered (``names``: those that are).

    ``unknown``: the sentence's opening (``"Unknown advantage estimator"``); ``offered``: what a plugin record offers of
    this kind; ``register``: how to add one; ``hint``: a better hint than a near-typo, if the caller has one.
    """
    because = unavailable_because(key)
    namesake = next((r for r in manager.plugin_state().records if r.name == key), None)
    if because is not None and namesake is not None and namesake.why_unavailable() is not None:
        return f"{kind} {name!r} is not available: {because}"
    from .mistakes import misplaced_entry_points  # only on this error path

    misplaced = misplaced_entry_points(manager.ENTRY_POINT_GROUP)
    misplaced_namesake = next((m for m in misplaced if m.name == key), None)
    if misplaced_namesake is not None:
        return f"{kind} {name!r} is not available: {misplaced_namesake}."
    if misplaced:
        because = f"{because} " if because else ""
        because += f"Entry points in a misspelt group, never loaded, which may offer it: {'; '.join(map(str, misplaced))}."
    if not hint:
        hint = near_typo_hint(key, names, narrowed=bool(misplaced) or failed_to_load())
    if namesake is not None and offered(namesake):  # the plugin of that entry-point name loaded: name what it offers
        hint = f" {namesake.provider} is installed and offers: {', '.join(offered(namesake))}.{hint}"
    return f"{unknown} {name!r}.{f' {because}' if because else ''}{hint} Available: {', '.join(names)}. {register}"
