"""``apply_transforms``: run a list of transforms on one role's advantages, with metrics per transform."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..transform_spec import transform_context
from .entries import SelectedTransform, narrow_dtype, narrow_dtype_message, resolve_transforms

__all__ = ["apply_transforms", "transform_metrics"]


def _defaults(fn: Any) -> set[str]:
    """The parameters of ``fn`` that have a default."""
    try:
        return {p.name for p in inspect.signature(fn).parameters.values() if p.default is not inspect.Parameter.empty}
    except (TypeError, ValueError):
        return set()


def transform_metrics(before: np.ndarray, after: np.ndarray, prefix: str) -> dict[str, float]:
    """``{prefix}/{mean,std,min,max,fraction_changed}`` of ``after`` (1-D, the values that count), ``fraction_changed`` against ``before``."""
    if after.size == 0:
        return {}
    return {
        f"{prefix}/mean": float(after.mean()),
        f"{prefix}/std": float(after.std()),
        f"{prefix}/min": float(after.min()),
        f"{prefix}/max": float(after.max()),
        f"{prefix}/fraction_changed": float(np.mean(after != before)),
    }


def apply_transforms(
    advantages: Any, entries: Any, *, role: str = "all_groups", token_level: bool = False, where: str = "advantage_transforms", **context: Any
) -> tuple[np.ndarray, dict[str, float]]:
    """Apply ``entries`` in order to ``advantages``; returns the new advantages (float64, a fresh array) and the metrics.

    ``advantages``: one role's advantages, ``(N,)`` one per unit in the collector's order (trajectories, or
    steps for a step-level estimator), or ``(B, T)`` per token with ``token_level=True`` (then ``mask`` is
    in ``context``). ``entries``: resolved :class:`SelectedTransform` objects or the raw configuration list.
    ``context``: the keywords of :data:`~rllm_plugins.transform_spec.CONTEXT_KEYWORDS` the caller has; each
    transform receives those it names. A sequence-level transform that is not elementwise cannot run on
    token-level advantages, nor a token-level one on per-unit advantages: ``ValueError`` naming it. Metrics:
    ``transform/{role}/{label}/{mean,std,min,max,fraction_changed}`` after each transform (over ``mask``'s
    tokens at the token level).
    """
    selected: Sequence[SelectedTransform] = entries if all(isinstance(e, SelectedTransform) for e in entries or ()) else resolve_transforms(entries, where)
    current = np.array(advantages, dtype=np.float64)
    metrics: dict[str, float] = {}
    if not selected:
        return current, metrics
    context = {**context, "role": role}
    mask = np.asarray(context["mask"], dtype=bool) if token_level and context.get("mask") is not None else None
    for choice in selected:
        spec = choice.transform.spec
        who = f"advantage transform {choice.label!r} ({choice.transform.provider}) for role {role!r}"
        if spec.level == "token" and not token_level:
            raise ValueError(
                f"{who} works on per-token advantages (B, T) with the policy's and the reference's log-probs; here the advantages are one "
                "per trajectory or step (the collector, TRL's outcome path without log-probs): use it in verl or TRL"
            )
        if spec.level == "sequence" and token_level and not spec.elementwise:
            raise ValueError(
                f"{who} works on one advantage per trajectory or step, and these advantages differ token by token (a token-level "
                "estimator such as gae, or step-level turns spread over tokens); only elementwise transforms (clip, scale) apply here"
            )
        named = transform_context(spec)
        missing = sorted(k for k in spec.requires if context.get(k) is None)
        if missing:
            raise ValueError(f"{who} needs {missing}, which this path does not provide")
        given = {k: v for k, v in context.items() if k in named}
        absent = sorted(named - set(given) - set(_defaults(spec.fn)))
        if absent:
            raise ValueError(f"{who} names {absent}, which this path does not provide (it provides: {', '.join(sorted(context))})")
        view = current.view()
        view.flags.writeable = False  # a transform that writes into its input fails here instead of changing it
        try:
            result = spec.fn(view, **choice.options, **given)
        except ValueError as e:
            raise ValueError(f"{who}: {e}") from None
        narrow = narrow_dtype(result)
        if narrow is not None:  # converted to float64 below, the precision it lost would pass unseen
            raise ValueError(narrow_dtype_message(who, narrow))
        out = np.array(result, dtype=np.float64)
        if out.shape != current.shape:
            raise ValueError(f"{who} returned shape {out.shape} for advantages of shape {current.shape}; a transform keeps the shape")
        if not np.isfinite(out).all():
            bad = np.argwhere(~np.isfinite(out))[0].tolist()
            raise ValueError(f"{who} returned {out[tuple(bad)]} at position {bad}; advantages must be finite")
        if mask is not None:
            metrics.update(transform_metrics(current[mask], out[mask], f"transform/{role}/{choice.label}"))
        else:
            metrics.update(transform_metrics(current.reshape(-1), out.reshape(-1), f"transform/{role}/{choice.label}"))
        current = out
    return current, metrics
