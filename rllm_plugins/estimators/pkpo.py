"""PKPO, Pass@K Policy Optimization (Walder & Karkhanis, 2025, https://arxiv.org/abs/2505.15201), as rLLM PR #743 adds it.

Each of a group's ``n`` trajectories is credited with the max reward of every ``k``-subset that
contains it, summed and divided by the number of ``k``-subsets ``C(n, k)`` (the unbiased estimator of
the max@k / pass@k gradient), and the credits are centred on their group mean::

    s_i = (1 / C(n, k)) * sum over k-subsets S with i in S of max_{j in S} r_j
    A_i = s_i - mean_g(s)

With the rewards sorted ascending (``g_0 <= ... <= g_{n-1}``), the trajectory at sorted position ``p``
is the max of ``C(p, k-1)`` of its subsets and shares the ``C(q-1, k-2)`` subsets whose max is
``g_q`` for each ``q > p``, so ``s_p = (C(p, k-1) g_p + sum_{q>p} C(q-1, k-2) g_q) / C(n, k)``: exact for
ties, which have equal credit. ``k = 1`` gives ``(r_i - mean_g) / n``; 0/1 rewards give a success
``k/n`` (PR #743's example: ``n = 4``, two successes, ``k = 2`` gives ``+-1/12``). Rewards are used as
they are (max@k), not thresholded. No std: ``norm_adv_by_std_in_grpo`` does not apply.

``k`` is the option ``k``, else ``AlgorithmConfig.pass_at_k`` (rLLM's field), else 1. As in the PR, ``k``
is clamped to the group size (``k >= n`` gives every credit the group max, so 0), and a group of one
gets 0; ``k`` below 1 or not an int is a ``ValueError`` wherever it comes from (the option, ``AlgorithmConfig.pass_at_k``
or the ``pass_at_k`` of any config object handed to the estimator; the PR clamps it to 1), and
:func:`check_pkpo_group_size` refuses ``k >= group size`` at config time.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..calling import is_finite_real, short_repr
from ..scaled import power_of_two_scale
from ..segments import GroupLayout, row_maxima
from ..spec import AdvEstimatorSpec, list_form_of

__all__ = ["SPECS", "calculate_pkpo_advantages", "check_pkpo_group_size", "check_pkpo_options", "pkpo"]


def _check_k(k: object) -> int:
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, numbers.Integral):
        raise ValueError(f"estimator 'pkpo': k must be an int (the k of pass@k), got {type(k).__name__} {k!r}")
    if k < 1:
        raise ValueError(f"estimator 'pkpo': k must be at least 1, got {k}")
    if not is_finite_real(k):  # pass@k of more samples than float64 can count: no group holds them
        raise ValueError(f"estimator 'pkpo': k must be an int within the float64 range (at most the group size), got {short_repr(k)}")
    return int(k)


def check_pkpo_options(options: Mapping[str, Any]) -> None:
    """Option ``k``, when given: an int >= 1."""
    if options.get("k") is not None:
        _check_k(options["k"])


def check_pkpo_group_size(options: Mapping[str, Any], group_size: int) -> int:
    """Config-time check: option ``k`` (default 1) below the configured group size, where it gives a signal."""
    k = _check_k(1 if options.get("k") is None else options["k"])
    if k >= group_size > 1:
        raise ValueError(
            f"estimator 'pkpo': k={k} is not below the group size {group_size} (trajectories per prompt): every "
            f"trajectory would get the group's max as credit, so advantage 0; choose k < {group_size} or sample more per prompt"
        )
    return k


def _credit_weights(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``C(p, k-1) / C(n, k)`` and ``C(p-1, k-2) / C(n, k)`` for sorted positions ``p < n`` (exact integers, one rounding)."""
    total = math.comb(n, k)
    own = np.array([math.comb(p, k - 1) / total for p in range(n)])
    shared = np.array([math.comb(p - 1, k - 2) / total if p >= 1 and k >= 2 else 0.0 for p in range(n)])
    return own, shared


def _pkpo_rows(rows: np.ndarray, k: int) -> np.ndarray:
    """PKPO advantages of ``rows`` ``(G, n)``, every group of size ``n``, ``1 <= k <= n``.

    Each row is computed divided by a power of two near its largest magnitude (exact: PKPO is linear, so
    ``A(c r) = c A(r)``), so no sum overflows where the advantages fit float64 (``[1e308, 1e308, 0]``, k=2: 0, 0, 0).
    """
    largest = row_maxima(np.abs(rows))
    scale = power_of_two_scale(largest)[:, None]
    at_k_one = k == 1 and np.isfinite(largest).all()  # the default k: no sort
    credit = _credit_at_k_one(rows / scale, rows.shape[1]) if at_k_one else _sorted_credit(rows, scale, k)
    centre = credit.mean(axis=1, keepdims=True)
    centre += (credit - centre).mean(axis=1, keepdims=True)  # one correction pass: equal credits centre to exactly 0
    credit -= centre
    with np.errstate(over="ignore"):  # an advantage beyond the range stays inf, refused where the advantages are checked
        return credit * scale


def _credit_at_k_one(scaled: np.ndarray, n: int) -> np.ndarray:
    """:func:`_sorted_credit` at ``k = 1`` for finite ``scaled`` ``(G, n)``, bit for bit, written in place without sorting.

    There every position's own weight is ``C(p, 0) / C(n, 1) = 1 / n`` and every shared one 0, so the credit at any position
    is ``scaled / n`` plus a sum of zeros, ``+0.0`` (it turns a ``-0.0`` credit into ``+0.0``, nothing else).
    """
    scaled *= 1 / n
    scaled += 0.0
    return scaled


def _sorted_credit(rows: np.ndarray, scale: np.ndarray, k: int) -> np.ndarray:
    """Pass@k credit ``(G, n)`` of ``rows`` divided by ``scale`` ``(G, 1)``: each row sorted, weighted, given back in its order.

    Tied rewards get bit-identical credit: each run of ties takes the credit of its first sorted position. The two scans
    along a row (the shared credit's running sum, the ties') go column by column when the rows are many and short
    (``n`` operations over ``G`` values each beat ``G`` scans of ``n``), else row by row; the numbers are the same.
    """
    g, n = rows.shape
    order = np.argsort(rows, axis=1)  # any order of ties: tied rewards get the same credit
    flat = order + np.arange(0, g * n, n)[:, None]  # (G, n) each sorted position's place in rows.ravel()
    ordered = rows.ravel()[flat] / scale
    own, shared = _credit_weights(n, k)
    upto = ordered * shared
    by_columns = g >= 4 * n
    if by_columns:
        for p in range(1, n):
            np.add(upto[:, p - 1], upto[:, p], out=upto[:, p])
    else:
        upto = np.cumsum(upto, axis=1)
    credit_sorted = own * ordered + (upto[:, -1:] - upto)  # + sum over q > p
    tied = np.diff(ordered, axis=1) == 0  # (G, n - 1) position p + 1 ties position p (NaN ties nothing)
    if by_columns:
        for p in range(1, n):
            np.copyto(credit_sorted[:, p], credit_sorted[:, p - 1], where=tied[:, p - 1])
    else:
        starts = np.where(tied, 0, np.arange(1, n))  # a run's first position, 0 inside a run
        run_start = np.maximum.accumulate(np.concatenate((np.zeros((g, 1), dtype=starts.dtype), starts), axis=1), axis=1)
        credit_sorted = np.take_along_axis(credit_sorted, run_start, axis=1)
    credit = np.empty(g * n)
    credit[flat] = credit_sorted
    return credit.reshape(g, n)


def pkpo(values: np.ndarray, offsets: np.ndarray, /, *, k: int | None = None, algorithm_config: Any = None, **_: Any) -> np.ndarray:
    """PKPO (option k, else ``algorithm_config.pass_at_k``, else 1): mean-centred pass@k credit per group."""
    layout = GroupLayout.from_offsets(offsets, len(values))
    given = getattr(algorithm_config, "pass_at_k", None)
    if k is not None and given is not None and k != given:  # as AlgorithmConfig refuses it: alone, as a composite term, by hand
        raise ValueError(f"estimator 'pkpo': option k={k!r} but algorithm_config.pass_at_k={given!r}; set k in one place")
    if k is None and given is not None:  # rLLM's field: the same rule as option k
        try:
            k = _check_k(algorithm_config.pass_at_k)
        except ValueError as e:
            raise ValueError(f"{e} (from algorithm_config.pass_at_k); rLLM PR #743 clamps it to 1, here it is refused: set pass_at_k >= 1") from None
    k = _check_k(1 if k is None else k)
    values = np.asarray(values, dtype=np.float64)
    size = layout.uniform_size
    if size is not None:  # equal groups: one (G, n) block, no gather
        return _pkpo_rows(values.reshape(-1, size), min(k, size)).reshape(-1) if size > 1 else np.zeros_like(values)
    out = np.zeros_like(values)
    starts = np.asarray(offsets[:-1], dtype=np.int64)
    for size in np.unique(layout.sizes).tolist():
        if size <= 1:
            continue  # a group of one: 0
        rows = starts[layout.sizes == size][:, None] + np.arange(size)
        out[rows] = _pkpo_rows(values[rows], min(k, size))
    return out


calculate_pkpo_advantages = list_form_of(pkpo, "calculate_pkpo_advantages")

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (
    AdvEstimatorSpec("pkpo", calculate_pkpo_advantages, pkpo, options=(), check_group_size=check_pkpo_group_size, check_options=check_pkpo_options),
)
