"""Several reward functions per trajectory: combine them before or after the estimator.

A role's rewards are ``rewards`` of shape ``(N, F)``: ``N`` trajectories in contiguous groups
(``offsets`` ``(G + 1,)``, see :mod:`.segments`) and ``F`` reward functions, NaN where a function
gave no reward (None). A row whose every function is NaN is *unscorable*: it takes part in no
statistic and gets advantage 0. ``weights`` ``(F,)`` default to 1.

- ``sum_then_normalize``: ``r = nansum(weights * rewards, axis=1)``, then the estimator once.
- ``normalize_then_sum`` (GDPO, https://arxiv.org/abs/2601.05242): the estimator's batched form on
  each function separately, over the rows where that function is present and the same groups;
  the weighted sum of those advantages (an absent function adds 0); then a whitening over the
  role's scorable rows, ``(s - mean) / (sample std + whiten_epsilon)`` (0 when fewer than 2 rows).

With one function and unit weight, ``sum_then_normalize`` is the estimator itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from .calling import as_finite_real, describe
from .outputs import as_advantages
from .scaled import power_of_two_scale
from .segments import GroupLayout, offsets_from_sizes

__all__ = ["AGGREGATIONS", "Aggregation", "aggregate_advantages", "check_aggregation", "normalize_then_sum", "sum_then_normalize", "whiten"]

Aggregation = Literal["sum_then_normalize", "normalize_then_sum"]
AGGREGATIONS: tuple[str, ...] = ("sum_then_normalize", "normalize_then_sum")

Batched = Callable[..., Any]


def check_aggregation(value: object, where: str = "multi_objective_aggregation") -> str:
    """``value`` if it names an aggregation, else a ``ValueError`` listing the choices."""
    if not isinstance(value, str) or value not in AGGREGATIONS:
        raise ValueError(f"{where} must be one of {', '.join(repr(a) for a in AGGREGATIONS)}, got {value!r}")
    return value


def _function_name(names: Sequence[str] | None, f: int) -> str:
    return f"reward function {f}" + (f" ({names[f]!r})" if names is not None and f < len(names) else "")


def _all_finite(values: np.ndarray) -> bool:
    """Whether every value is finite: one sum (no temporary), the element-wise test only when the sum is not finite."""
    return math.isfinite(float(values.sum())) or bool(np.isfinite(values).all())


class _Layout:
    """The groups: ``offsets`` as given (the estimator validates them), the validated :class:`GroupLayout` on first use."""

    def __init__(self, offsets: np.ndarray, num_rows: int) -> None:
        self.offsets, self._num_rows, self._layout = np.asarray(offsets), num_rows, None

    @property
    def groups(self) -> GroupLayout:
        if self._layout is None:
            self._layout = GroupLayout.from_offsets(self.offsets, self._num_rows)
        return self._layout


def _prepare(
    rewards: np.ndarray, offsets: np.ndarray, weights: Any, lengths: Any, names: Sequence[str] | None, where: str
) -> tuple[np.ndarray, _Layout, np.ndarray, np.ndarray | None, bool]:
    """Validate: rewards float64 ``(N, F)``, the layout, weights ``(F,)``, lengths ``(N,)`` or None, and whether no reward is missing."""
    array = np.asarray(rewards)
    if array.ndim == 1:
        array = array.reshape(-1, 1)
    if array.ndim != 2:
        raise ValueError(f"{where}: rewards must have shape (N, num_reward_functions), got {array.shape}")
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{where}: rewards must be real numbers (NaN for a missing one), got dtype {array.dtype}")
    array = array.astype(np.float64, copy=False)
    layout = _Layout(offsets, array.shape[0])
    complete = _all_finite(array)
    if not complete and np.isinf(array).any():  # NaN (missing) is allowed, inf is not
        row, f = (int(i[0]) for i in np.nonzero(np.isinf(array)))
        raise ValueError(f"{where}: row {row}, {_function_name(names, f)}: reward is {array[row, f]}; rewards must be finite or NaN (missing)")
    if weights is None:
        w = np.ones(array.shape[1])
    else:
        try:
            w = np.asarray(weights, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: weights must be {array.shape[1]} real numbers, got {weights!r}") from None
        if w.size != array.shape[1]:
            raise ValueError(f"{where}: {w.size} weights for {array.shape[1]} reward functions")
        if not np.isfinite(w).all():
            raise ValueError(f"{where}: weights must be finite, got {w.tolist()}")
    if lengths is not None:
        lengths = np.asarray(lengths, dtype=np.float64).reshape(-1)
        if lengths.size != array.shape[0]:
            raise ValueError(f"{where}: lengths has {lengths.size} entries for {array.shape[0]} rows")
    return array, layout, w, lengths, complete


def _present_offsets(layout: _Layout, present: np.ndarray) -> np.ndarray:
    """Offsets ``(G + 1,)`` of the groups restricted to the rows where ``present`` ``(N,)`` is True."""
    return offsets_from_sizes(layout.groups.sum(present.astype(np.int64)))


def _estimate_present(
    estimator: Batched, values: np.ndarray, layout: _Layout, present: np.ndarray, lengths: np.ndarray | None, kwargs: dict[str, Any], what: str
) -> tuple[np.ndarray, np.ndarray]:
    """The estimator on the rows where ``present`` ``(N,)`` is True, groups kept: (those rows, their advantages)."""
    rows = np.flatnonzero(present)
    sub = lengths[rows] if lengths is not None else None
    return rows, _estimate(estimator, values[rows], _present_offsets(layout, present), sub, kwargs, what)


def _estimate(estimator: Batched, values: np.ndarray, offsets: np.ndarray, lengths: np.ndarray | None, kwargs: dict[str, Any], what: str) -> np.ndarray:
    """One batched estimator call, checked: advantages float64 ``(n,)``."""
    if lengths is not None and "lengths" not in kwargs:
        kwargs = {**kwargs, "lengths": lengths}
    advantages = as_advantages(estimator(values, offsets, **kwargs), what)
    if advantages.size != values.size:
        raise ValueError(f"{what}: the estimator returned {advantages.size} advantages for {values.size} rows")
    if not _all_finite(advantages):
        i = int(np.flatnonzero(~np.isfinite(advantages))[0])
        raise ValueError(f"{what}: the estimator gave advantage {advantages[i]} to row {i} of the rows it was given; advantages must be finite")
    return advantages


def whiten(values: np.ndarray, scorable: np.ndarray | None = None, epsilon: float = 1e-6) -> np.ndarray:
    """``(values - mean) / (sample std + epsilon)`` over the rows where ``scorable`` ``(N,)`` is True; 0 elsewhere.

    Fewer than two scorable rows give 0 (no spread to normalise by), as does a zero denominator.
    """
    every = scorable is None or bool(scorable.all())
    x = np.array(values if every else values[scorable], dtype=np.float64)
    out = _whiten_in_place(x, epsilon)
    if every:
        return out
    full = np.zeros(values.size)
    full[scorable] = out
    return full


_SCALED_ABOVE = 2.0**490  # below it, n < 2**40 values sum, and their deviations square, within float64


def _whiten_in_place(x: np.ndarray, epsilon: float) -> np.ndarray:
    """:func:`whiten` of every value of ``x`` ``(n,)``, overwriting ``x`` (no temporary in the common case)."""
    if x.size < 2:
        x[:] = 0.0
        return x
    peak = max(float(x.max()), -float(x.min()))  # max |x| without an (n,) temporary
    if peak > _SCALED_ABOVE:  # a deviation or its square could overflow: whiten x and eps divided by a power of two (exact)
        scale = float(power_of_two_scale(np.array(peak)))
        x /= scale
        epsilon /= scale
    mean = float(x.mean())
    x -= mean
    std = math.sqrt(float(np.einsum("i,i->", x, x)) / (x.size - 1))
    denominator = std + epsilon
    if not denominator > 0:
        x[:] = 0.0
        return x
    x /= denominator
    return x


def _weighted_sum(array: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``(N,)`` sum over the columns of ``array`` ``(N, F)`` times ``w`` ``(F,)``, column by column (no BLAS call: a
    threaded matrix-vector product stalls on a loaded machine; the same order of additions with and without NaNs)."""
    combined = array[:, 0] * w[0]
    for f in range(1, array.shape[1]):
        combined += array[:, f] * w[f]
    return combined


def sum_then_normalize(
    rewards: np.ndarray,
    offsets: np.ndarray,
    estimator: Batched,
    *,
    weights: Any = None,
    lengths: Any = None,
    names: Sequence[str] | None = None,
    where: str = "sum_then_normalize",
    **kwargs: Any,
) -> np.ndarray:
    """Weighted NaN-sum of ``rewards`` ``(N, F)``, then ``estimator`` on the scorable rows: advantages float64 ``(N,)``."""
    array, layout, w, lengths, complete = _prepare(rewards, offsets, weights, lengths, names, where)
    if complete:  # the common case: every function scored every row
        return _estimate(estimator, _weighted_sum(array, w), layout.offsets, lengths, kwargs, where)
    present = ~np.isnan(array)
    scorable = present.any(axis=1)
    combined = _weighted_sum(np.where(present, array, 0.0), w)
    out = np.zeros(array.shape[0])
    if scorable.all():
        out[:] = _estimate(estimator, combined, layout.offsets, lengths, kwargs, where)
    elif scorable.any():
        rows, advantages = _estimate_present(estimator, combined, layout, scorable, lengths, kwargs, where)
        out[rows] = advantages
    return out


def normalize_then_sum(
    rewards: np.ndarray,
    offsets: np.ndarray,
    estimator: Batched,
    *,
    weights: Any = None,
    lengths: Any = None,
    whiten_epsilon: float = 1e-6,
    names: Sequence[str] | None = None,
    where: str = "normalize_then_sum",
    **kwargs: Any,
) -> np.ndarray:
    """GDPO with any estimator: per-function advantages, weighted sum, whitening over the role; float64 ``(N,)``.

    ``whiten_epsilon`` is the whitening's (TRL uses 1e-4); the estimator's own options (its ``epsilon``
    included) go in ``kwargs``. Rewards in Fortran order (each function's column contiguous) save one
    transposed copy of the table.
    """
    if isinstance(whiten_epsilon, (bool, np.bool_)) or as_finite_real(whiten_epsilon) is None or whiten_epsilon < 0:
        raise ValueError(f"{where}: whiten_epsilon must be a finite number >= 0, got {describe(whiten_epsilon)}")
    array, layout, w, lengths, complete = _prepare(rewards, offsets, weights, lengths, names, where)
    present = None if complete else ~np.isnan(array)
    by_function = np.ascontiguousarray(array.T)  # (F, N): a view of F-ordered rewards, else one transposed copy
    total: np.ndarray | None = None
    for f in range(array.shape[1]):
        what = f"{where}, {_function_name(names, f)}"
        column = None if present is None else present[:, f]
        if column is None or column.all():
            advantages = _estimate(estimator, by_function[f], layout.offsets, lengths, kwargs, what)
            if total is None:  # a copy: what the estimator returned is never written over
                total = advantages * w[f] if w[f] != 1.0 else np.array(advantages)
            else:
                total += advantages if w[f] == 1.0 else w[f] * advantages
            del advantages  # released before the next function's call: one (N,) array fewer at its peak
            continue
        if total is None:
            total = np.zeros(array.shape[0])
        if column.any():
            rows, advantages = _estimate_present(estimator, by_function[f], layout, column, lengths, kwargs, what)
            total[rows] += w[f] * advantages
    if total is None:  # no reward function
        total = np.zeros(array.shape[0])
    if present is None:
        return _whiten_in_place(total, float(whiten_epsilon))
    return whiten(total, present.any(axis=1), float(whiten_epsilon))


def aggregate_advantages(rewards: np.ndarray, offsets: np.ndarray, estimator: Batched, *, aggregation: str = "sum_then_normalize", **kwargs: Any) -> np.ndarray:
    """:func:`sum_then_normalize` or :func:`normalize_then_sum` by name (``whiten_epsilon`` only applies to the latter)."""
    if check_aggregation(aggregation) == "normalize_then_sum":
        return normalize_then_sum(rewards, offsets, estimator, **kwargs)
    kwargs.pop("whiten_epsilon", None)
    return sum_then_normalize(rewards, offsets, estimator, **kwargs)
