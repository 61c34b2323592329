"""``shape_selected``: resolved reward shapers on one role's rewards; the shaped rewards, each term, and metrics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..shaper_spec import shaper_context
from ..transforms.entries import narrow_dtype

__all__ = ["shape_selected", "term_metrics"]


def term_metrics(values: np.ndarray, prefix: str) -> dict[str, float]:
    """``{prefix}/{mean,min,max}`` of ``values`` (1-D); nothing for no values."""
    if values.size == 0:
        return {}
    return {f"{prefix}/mean": float(values.mean()), f"{prefix}/min": float(values.min()), f"{prefix}/max": float(values.max())}


def _terms(result: Any, choice: Any, n: int, who: str) -> dict[str, np.ndarray]:
    """A shaper's output as ``{label: (N,) float64}``: one array (labelled by the entry) or a mapping of named terms."""
    named = result.items() if isinstance(result, Mapping) else [(None, result)]
    terms: dict[str, np.ndarray] = {}
    for key, value in named:
        if key is not None and (not isinstance(key, str) or not key or "/" in key):
            raise ValueError(f"{who} returned a term named {key!r}; name each term with a non-empty str without '/'")
        label = choice.label if key is None else f"{choice.label}/{key}"
        narrow = narrow_dtype(value)
        if narrow is not None and "float16" in narrow:  # integers and bools are exact; a half float lost digits already
            raise ValueError(f"{who} returned the term {label!r} as {narrow}, which holds less than float32: return float64 or float32")
        try:
            kind = np.asarray(value).dtype.kind
            term = np.array(value, dtype=np.float64)
        except (TypeError, ValueError):
            kind = "O"
        if kind not in "biuf":
            raise ValueError(f"{who} returned {type(value).__name__} {value!r:.60} for the term {label!r}; return an array of one number per unit")
        if term.shape != (n,):
            raise ValueError(f"{who} returned the term {label!r} with shape {term.shape} for {n} units; return one number per unit ({n},)")
        if not np.isfinite(term).all():
            u = int(np.flatnonzero(~np.isfinite(term))[0])
            raise ValueError(f"{who} returned {term[u]} for unit {u} in the term {label!r}; terms must be finite")
        terms[label] = term
    return terms


def shape_selected(
    rewards: Any, selected: Sequence[Any], *, role: str = "all_groups", where: str = "reward_shapers", **context: Any
) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, float]]:
    """``(shaped (N,), terms, metrics)``: ``rewards`` ``(N,)`` plus every term of every shaper in ``selected``.

    ``selected``: resolved :class:`~rllm_plugins.shaping.entries.SelectedShaper` objects. ``context``: the keywords of
    :data:`~rllm_plugins.shaper_spec.SHAPER_CONTEXT` the caller has; each shaper receives those it names. Every shaper
    sees the unshaped ``rewards`` (read-only): the order of ``selected`` changes no number. ``terms``: each term by label
    (``name``, ``name/term`` for a shaper returning several). Metrics: ``shaping/{role}/{label}/{mean,min,max}`` per
    term and ``shaping/{role}/shaped_reward/{mean,min,max}``.
    """
    raw = np.array(rewards, dtype=np.float64)
    if raw.ndim != 1:
        raise ValueError(f"{where}: reward shapers add to one reward per unit, got rewards of shape {raw.shape}")
    if not selected:
        return raw, {}, {}
    context = {**context, "role": role}
    view = raw.view()
    view.flags.writeable = False  # a shaper that writes into its input fails here instead of changing it
    terms: dict[str, np.ndarray] = {}
    for choice in selected:
        spec = choice.shaper.spec
        who = f"{choice.who} for role {role!r}"
        named = shaper_context(spec)
        missing = sorted(k for k in spec.requires if context.get(k) is None)
        if missing:
            raise ValueError(f"{who} needs {missing}, which this path does not provide")
        given = {k: v for k, v in context.items() if k in named and v is not None}
        try:
            result = spec.fn(view, **choice.options, **given)
        except ValueError as e:
            raise ValueError(f"{who}: {e}") from None
        except TypeError as e:
            absent = sorted(named - set(given))
            hint = f" (this path does not provide {absent})" if absent else ""
            raise ValueError(f"{who}: {e}{hint}") from None
        except Exception as e:  # a plugin's own failure, named with the shaper (the traceback kept)
            raise ValueError(f"{who} raised {type(e).__name__}: {e}") from e
        for label, term in _terms(result, choice, raw.size, who).items():
            if label in terms:
                raise ValueError(f"{who} returned the term {label!r} twice")
            terms[label] = term
    # each unit's terms summed smallest first: the same bits whatever the order of the list
    shaped = raw + np.sort(np.stack(list(terms.values())), axis=0).sum(axis=0) if terms else raw
    if not np.isfinite(shaped).all():
        u = int(np.flatnonzero(~np.isfinite(shaped))[0])
        raise ValueError(f"{where} for role {role!r}: unit {u}'s shaped reward is {shaped[u]} (reward {raw[u]} plus its terms); it must be finite")
    metrics: dict[str, float] = {}
    for label, term in terms.items():
        metrics.update(term_metrics(term, f"shaping/{role}/{label}"))
    metrics.update(term_metrics(shaped, f"shaping/{role}/shaped_reward"))
    return shaped, terms, metrics
