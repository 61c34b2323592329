"""Core: every built-in's batched form and list form vs a per-group Python loop (rLLM's way).

The loop is how rLLM computes advantages: one ``np.mean``/``np.std`` (or equivalent) per
group over a list of arrays. The batched form takes flat values ``(N,)`` and offsets
``(G + 1,)``; the list form takes and returns one array per group (the spec's API), so
``list - batched`` is the per-group price of that API. Every pair is checked for equal
outputs before it is timed.

Groups of 8 run at every size (the plot); groups of 4 and 16 at the smallest (the fixed cost) and the largest
(the targets). A call of the budget or more (the loops and list forms at 1M, seconds each) is timed by its
checked call and one more run, the faster kept; shorter ones by :func:`~benchmarks.timing.measure`.

The role-level estimators (:data:`ROLE_LEVEL`: one statistic over the whole role, nothing per group) are held to a
floor instead of the loop: their loop does one cheap numpy call per group, so its time, not theirs, sets the ratio. The floor
(:func:`role_z_floor`) is a role-wide z-score written plainly in numpy with the fewest passes numpy allows for the same
numbers: a sum, the centred output written, its sum (the mean's correction, subtracted in place where it is not 0),
the sum of squares, one in-place division.

Run: ``python -m benchmarks.core_estimators [--quick]``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from rllm_plugins.registry import get_estimator

from .report import Report, Target, script_main
from .timing import Table, format_ratio, format_time, measure

__all__ = ["LOOPS", "ROLE_LEVEL", "role_z_floor", "run"]

EPS = 1e-6
TRL_EPS = 1e-4


def loop_grpo(rewards: list[np.ndarray], lengths: list[np.ndarray]) -> list[np.ndarray]:
    out = []
    for r in rewards:
        mean, std = (0.0, 1.0) if len(r) <= 1 else (np.mean(r), np.std(r))
        out.append((r - mean) / (std + EPS))
    return out


def loop_reinforce(rewards: list[np.ndarray], lengths: list[np.ndarray]) -> list[np.ndarray]:
    return [np.array(r, dtype=np.float64) for r in rewards]


def loop_reinforce_plus_plus_baseline(rewards: list[np.ndarray], lengths: list[np.ndarray]) -> list[np.ndarray]:
    centred = [r - np.mean(r) if len(r) > 1 else np.array(r, dtype=np.float64) for r in rewards]
    std = np.std(np.concatenate(centred))
    return [c / (std + EPS) for c in centred]


def loop_rloo(rewards: list[np.ndarray], lengths: list[np.ndarray]) -> list[np.ndarray]:
    out = []
    for r in rewards:
        n = len(r)
        out.append(np.array(r, dtype=np.float64) if n <= 1 else n / (n - 1) * (r - r.mean()))
    return out


def loop_prpo(rewards: list[np.ndarray], lengths: list[np.ndarray]) -> list[np.ndarray]:
    flat = np.concatenate(rewards)
    mean, std = np.mean(flat), np.std(flat)
    return [(r - mean) / (std + EPS) for r in rewards]


def loop_opo(rewards: list[np.ndarray], lengths: list[np.ndarray]) -> list[np.ndarray]:
    out = []
    for r, length in zip(rewards, lengths, strict=True):
        baseline = np.sum(length * r) / np.sum(length) if len(r) > 1 and np.sum(length) > 0 else 0.0
        out.append(r - baseline)
    return out


def loop_grpo_passk(rewards: list[np.ndarray], lengths: list[np.ndarray]) -> list[np.ndarray]:
    out = []
    for r in rewards:
        adv = np.zeros(len(r))
        if len(r) > 1:
            best = int(np.argmax(r))
            second = np.max(np.delete(r, best))
            adv[best] = (r[best] - second) / (np.std(r) + EPS)
        out.append(adv)
    return out


def loop_trl_grpo(rewards: list[np.ndarray], lengths: list[np.ndarray]) -> list[np.ndarray]:
    out = []
    for r in rewards:
        adv = (r - np.mean(r)) / (np.std(r, ddof=1) + TRL_EPS) if len(r) > 1 else np.zeros(len(r))
        out.append(adv)
    return out


def loop_trl_grpo_batch(rewards: list[np.ndarray], lengths: list[np.ndarray]) -> list[np.ndarray]:
    std = np.std(np.concatenate(rewards), ddof=1)
    return [(r - np.mean(r)) / (std + TRL_EPS) for r in rewards]


def loop_dr_grpo(rewards: list[np.ndarray], lengths: list[np.ndarray]) -> list[np.ndarray]:
    return [r - np.mean(r) if len(r) > 1 else np.array(r, dtype=np.float64) for r in rewards]


def loop_maxrl(rewards: list[np.ndarray], lengths: list[np.ndarray]) -> list[np.ndarray]:
    out = []
    for r in rewards:
        mean = np.mean(r)
        out.append((r - mean) / abs(mean) if mean != 0 else np.zeros(len(r)))
    return out


def passk_k(group_size: int) -> int:
    """The pass@k ``k`` benchmarked at a group size: half the group."""
    return max(1, group_size // 2)


def loop_passk_training(rewards: list[np.ndarray], lengths: list[np.ndarray]) -> list[np.ndarray]:
    """The authors' per-group formula with binomial coefficients (``math.comb``)."""
    out = []
    for r in rewards:
        n, k = len(r), passk_k(len(r))
        success = r > 0
        failures = n - int(np.count_nonzero(success))
        mean = 1.0 - math.comb(failures, k) / math.comb(n, k)
        std = math.sqrt(mean * (1.0 - mean))
        negative = 1.0 - mean - (math.comb(failures - 1, k - 1) / math.comb(n - 1, k - 1) if failures else 0.0)
        out.append(np.where(success, (1.0 - mean) / (std + EPS), negative / (std + EPS)))
    return out


def loop_pkpo(rewards: list[np.ndarray], lengths: list[np.ndarray]) -> list[np.ndarray]:
    """rLLM PR #743's per-group way: sort, then each sorted position's credit with ``math.comb`` (k = half the group)."""
    out = []
    for r in rewards:
        n, k = len(r), passk_k(len(r))
        order = np.argsort(r, kind="stable")
        ordered = r[order]
        credit = np.empty(n)
        later = 0.0
        for p in range(n - 1, -1, -1):
            credit[p] = (math.comb(p, k - 1) * ordered[p] + later) / math.comb(n, k)
            later += (math.comb(p - 1, k - 2) if p >= 1 and k >= 2 else 0) * ordered[p]
        advantages = np.empty(n)
        advantages[order] = credit - credit.mean()
        out.append(advantages)
    return out


def loop_minus_length_weighted_mean(rewards: list[np.ndarray], lengths: list[np.ndarray]) -> list[np.ndarray]:
    """One pooled baseline, summed group by group (rLLM PR #757's way: a pass over the groups, then one over them again)."""
    weighted = tokens = 0.0
    for r, n in zip(rewards, lengths, strict=True):
        weighted += float(np.dot(r, n))
        tokens += float(n.sum())
    baseline = weighted / tokens if tokens > 0 else 0.0
    return [r - baseline for r in rewards]


def loop_gpg(rewards: list[np.ndarray], lengths: list[np.ndarray]) -> list[np.ndarray]:
    alpha = sum(len(r) for r in rewards) / max(sum(int(np.count_nonzero(r)) for r in rewards), 1)
    return [alpha * (r - (np.mean(r) if len(r) > 1 else 0.0)) for r in rewards]


def loop_verl_grpo(rewards: list[np.ndarray], lengths: list[np.ndarray]) -> list[np.ndarray]:
    out = []
    for r in rewards:
        mean, std = (0.0, 1.0) if len(r) <= 1 else (np.mean(r), np.std(r, ddof=1))
        out.append((r - mean) / (std + EPS))
    return out


def loop_verl_rloo_vectorized(rewards: list[np.ndarray], lengths: list[np.ndarray]) -> list[np.ndarray]:
    out = []
    for r in rewards:
        n = len(r)
        out.append(np.zeros(n) if n <= 1 else n / (n - 1) * (r - r.mean()))
    return out


def loop_verl_reinforce_plus_plus_baseline(rewards: list[np.ndarray], lengths: list[np.ndarray]) -> list[np.ndarray]:
    centred = [r - np.mean(r) if len(r) > 1 else np.array(r, dtype=np.float64) for r in rewards]
    flat, weights = np.concatenate(centred), np.concatenate(lengths)
    tokens = weights.sum()
    mean = np.dot(weights, flat) / tokens
    std = math.sqrt(np.dot(weights, (flat - mean) ** 2) / (tokens - 1) + 1e-8)
    return [(c - mean) / std for c in centred]


LOOPS: dict[str, Callable[[list[np.ndarray], list[np.ndarray]], list[np.ndarray]]] = {
    "grpo": loop_grpo,
    "reinforce": loop_reinforce,
    "reinforce_plus_plus_baseline": loop_reinforce_plus_plus_baseline,
    "rloo": loop_rloo,
    "prpo": loop_prpo,
    "opo": loop_opo,
    "grpo_passk": loop_grpo_passk,
    "trl_grpo": loop_trl_grpo,
    "trl_grpo_batch": loop_trl_grpo_batch,
    "dr_grpo": loop_dr_grpo,
    "maxrl": loop_maxrl,
    "passk_training": loop_passk_training,
    "pkpo": loop_pkpo,
    "minus_length_weighted_mean": loop_minus_length_weighted_mean,
    "gpg": loop_gpg,
    "verl_grpo": loop_verl_grpo,
    "verl_rloo_vectorized": loop_verl_rloo_vectorized,
    "verl_reinforce_plus_plus_baseline": loop_verl_reinforce_plus_plus_baseline,
}
# estimators whose target at the largest size is >= 20x at every group size (>= 50x is kept for the original built-ins)
LATER_BUILTINS = (
    *("dr_grpo", "maxrl", "passk_training", "pkpo", "minus_length_weighted_mean", "gpg"),
    *("verl_grpo", "verl_rloo_vectorized", "verl_reinforce_plus_plus_baseline"),
)

PLOTTED = ("grpo", "rloo")
PLOT_GROUP_SIZE = 8
TARGET_SPEEDUP = 50.0
TARGET_SPEEDUP_LATER = 20.0
TARGET_OVERHEAD_S = 2e-6
# one statistic over the whole role and nothing per group: the target is against role_z_floor, not the loop
ROLE_LEVEL = ("prpo",)
TARGET_VS_ROLE_FLOOR = 1.5


def role_z_floor(values: np.ndarray) -> np.ndarray:
    """``(values - mean) / (std + eps)`` over all of ``values`` ``(N,)``, the mean exact to rounding: sum, centred write, the
    mean's correction (a sum of the centred values, subtracted in place where it is not 0), sum of squares, divide.

    Without the correction a role of ``[0.1] * 3`` gets advantages of -1.4e-11 instead of 0: a z-score that is not the
    estimators' numbers is no floor for them.
    """
    n = values.size
    out = values - float(np.einsum("i->", values)) / n
    correction = float(np.einsum("i->", out)) / n
    if correction:
        out -= correction
    out /= math.sqrt(float(np.einsum("i,i->", out, out)) / n) + EPS
    return out


def _kwargs(name: str, lengths: np.ndarray, group_size: int) -> dict[str, Any]:
    """The options each estimator is benchmarked with (response lengths where it reads them, pass@k's k)."""
    if name in ("opo", "verl_reinforce_plus_plus_baseline", "minus_length_weighted_mean"):
        return {"lengths": lengths}
    if name in ("passk_training", "pkpo"):
        return {"k": passk_k(group_size)}
    return {}


def _check_equal(name: str, expected: list[np.ndarray], flat: np.ndarray, listed: list[np.ndarray]) -> None:
    reference = np.concatenate(expected)
    for form, got in (("batched", flat), ("list", np.concatenate(listed))):
        if not np.allclose(got, reference, rtol=1e-6, atol=1e-6):
            worst = float(np.max(np.abs(got - reference)))
            raise AssertionError(f"{name}: the {form} form differs from the per-group loop by up to {worst:g}")


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and the seconds it took."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _time(fn: Callable[[], object], first_s: float, budget: float, min_runs: int) -> float:
    """Seconds per call of ``fn``, whose checked call took ``first_s``.

    A call that alone fills ``budget`` (the loops and list forms at the largest size, seconds each) is run once more
    and the faster of the two kept: a burst of load inflates one run, rarely both. Shorter calls: :func:`measure`.
    """
    if budget > 0 and first_s >= budget:
        return min(first_s, _timed(fn)[1])
    return measure(fn, budget, min_runs).median_s


def run(quick: bool = False) -> Report:
    """Time every built-in at each size and group size; return the tables, plot series and targets."""
    largest = 1_000 if quick else 1_000_000
    sizes_by_group = {4: [largest]} if quick else {4: [1_000, largest], PLOT_GROUP_SIZE: [1_000, 10_000, 100_000, largest], 16: [1_000, largest]}
    budget = 0.0 if quick else 0.2
    min_runs = 1 if quick else 3
    rng = np.random.default_rng(0)
    report = Report("core")
    table = Table(
        "Core estimators: per-group loop vs our list form vs our batched form",
        ["estimator", "group size", "trajectories", "groups", "loop", "list form", "batched", "loop / batched", "loop / list", "list overhead / group"],
    )
    table.notes.append(
        "loop: rLLM's per-group Python loop (np.mean/np.std per group) over a list of arrays; "
        "list form: our `get_rllm_adv_estimator(name)` (list in, list out); batched: our batched form on flat values + offsets."
    )
    table.notes.append("list overhead / group = (list form - batched) / groups: building one array per group on the way in and out.")
    table.notes.append(
        f"Groups of {PLOT_GROUP_SIZE} at every size; the other group sizes at the smallest and the largest only (the sizes between "
        f"scale as the loop does, per group). A call of {budget:g} s or more: the faster of two runs."
    )
    table.notes.append(
        "reinforce: rLLM returns its input list unchanged (no work at all); the loop here copies each group, as our forms do, "
        "so the row shows the cost of a copy."
    )
    floors = Table(
        "Role-level estimators vs a role-wide z-score in numpy (the floor)",
        ["estimator", "group size", "trajectories", "floor", "batched", "batched / floor", "loop / batched"],
    )
    floors.notes.append(
        f"{', '.join(ROLE_LEVEL)}: one statistic over the whole role, so rLLM's loop does one cheap numpy call per group and "
        "the ratio to it is set by the loop's cost. floor: (r - mean) / (std + eps) over the role, the mean exact to rounding, in "
        "the fewest passes numpy allows (sum, centred write, a second sum for the mean's correction, subtracted in place where "
        "not 0, sum of squares, in-place divide)."
    )
    worst_floor: dict[int, tuple[float, str]] = {}
    worst_speedup: dict[int, float] = {}
    worst_later: dict[int, tuple[float, str]] = {}
    worst_overhead = 0.0
    for k, sizes in sizes_by_group.items():
        for n in sizes:
            groups = n // k
            values = rng.integers(0, 2, size=groups * k).astype(np.float64) + rng.normal(0.0, 0.1, size=groups * k)
            lengths = rng.integers(1, 1024, size=values.size).astype(np.float64)
            offsets = np.arange(0, values.size + 1, k, dtype=np.int64)
            rewards = list(values.reshape(-1, k).copy())
            lengths_by_group = list(lengths.reshape(-1, k))
            for name, loop in LOOPS.items():
                estimator = get_estimator(name)
                kwargs = _kwargs(name, lengths, k)
                loop_call, list_call = partial(loop, rewards, lengths_by_group), partial(estimator.list_form, rewards=rewards, **kwargs)
                expected, first_loop = _timed(loop_call)
                (listed, _), first_list = _timed(list_call)
                _check_equal(name, expected, estimator.batched_form(values, offsets, **kwargs), listed)
                t_loop = _time(loop_call, first_loop, budget, min_runs)
                t_list = _time(list_call, first_list, budget, min_runs)
                t_batched = measure(partial(estimator.batched_form, values, offsets, **kwargs), budget, min_runs).median_s
                overhead = (t_list - t_batched) / groups
                table.add(
                    name, k, f"{values.size:,}", f"{groups:,}", format_time(t_loop), format_time(t_list), format_time(t_batched),
                    format_ratio(t_loop / t_batched), format_ratio(t_loop / t_list), format_time(max(overhead, 0.0)),
                )  # fmt: skip
                if name in PLOTTED and k == PLOT_GROUP_SIZE:
                    report.point("core", f"{name}: per-group loop (rLLM)", values.size, t_loop)
                    report.point("core", f"{name}: list form (ours)", values.size, t_list)
                    report.point("core", f"{name}: batched (ours)", values.size, t_batched)
                if name in ROLE_LEVEL and n == largest:
                    t_floor = measure(partial(role_z_floor, values), budget, min_runs).median_s
                    cells = [format_time(t_floor), format_time(t_batched), format_ratio(t_batched / t_floor), format_ratio(t_loop / t_batched)]
                    floors.add(name, k, f"{values.size:,}", *cells)
                    worst_floor[k] = max(worst_floor.get(k, (0.0, name)), (t_batched / t_floor, name))
                elif name in LATER_BUILTINS and n == largest:
                    worst_later[k] = min(worst_later.get(k, (np.inf, name)), (t_loop / t_batched, name))
                elif name != "reinforce" and n == largest:
                    worst_speedup[k] = min(worst_speedup.get(k, np.inf), t_loop / t_batched)
                if n == largest:
                    worst_overhead = max(worst_overhead, overhead)
    report.tables.extend((table, floors))
    for k, speedup in worst_speedup.items():
        name = f"batched vs loop, {largest // k:,} groups of {k} (slowest estimator but reinforce and the role-level ones)"
        report.targets.append(Target.check(name, speedup, TARGET_SPEEDUP, at_most=False, quick=quick))
    for k, (speedup, slowest) in worst_later.items():
        name = f"batched vs loop, {largest // k:,} groups of {k}: {', '.join(LATER_BUILTINS)} (slowest: {slowest})"
        report.targets.append(Target.check(name, speedup, TARGET_SPEEDUP_LATER, at_most=False, quick=quick))
    for k, (ratio, slowest) in worst_floor.items():
        name = f"role-level estimators vs the role-wide z-score floor, {largest // k:,} groups of {k} (slowest: {slowest})"
        report.targets.append(Target.check(name, ratio, TARGET_VS_ROLE_FLOOR, quick=quick))
    name = "list-form overhead per group (worst estimator, largest size)"
    overhead_goal = f"≤ {format_time(TARGET_OVERHEAD_S)}"
    report.targets.append(Target.check(name, worst_overhead, TARGET_OVERHEAD_S, measured=format_time(worst_overhead), goal=overhead_goal, quick=quick))
    return report


def main() -> None:
    script_main(__doc__, run, "one small size, one run each (smoke test)")


if __name__ == "__main__":
    main()
