"""Several reward functions: the ``(N, F)`` aggregation path vs ``F`` separate estimator calls.

``normalize_then_sum`` (GDPO with any estimator) runs the estimator's batched form once per
reward function, sums the weighted advantages and whitens them over the role. It is compared
with ``F`` separate calls written by hand around the same estimator (contiguous columns given,
then the weighted sum and the whitening in plain numpy): the target, since that is the
alternative to the ``(N, F)`` path. The bare ``F`` calls (nothing summed or whitened) are shown
too, so the whole price of the aggregation is visible. ``sum_then_normalize`` is compared with
one call on a precomputed weighted sum. Outputs are checked against the by-hand computation
before timing.

Run: ``python -m benchmarks.multi_objective [--quick]``.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from rllm_plugins.aggregation import normalize_then_sum, sum_then_normalize
from rllm_plugins.registry import get_estimator

from .report import Report, Target, script_main
from .timing import Table, format_ratio, format_time, measure_interleaved

__all__ = ["run"]

TARGET_RATIO = 1.2
GROUP_SIZE = 8
ESTIMATORS = ("grpo", "rloo", "reinforce_plus_plus_baseline")
COLUMNS = ["estimator", "F", "rows", "F calls + sum + whitening", "normalize_then_sum", "ratio"]
COLUMNS += ["bare F calls", "ratio to bare", "1 call on the sum", "sum_then_normalize", "ratio to 1 call"]


def _separate_calls(batched, columns: list[np.ndarray], offsets: np.ndarray) -> list[np.ndarray]:
    return [batched(column, offsets) for column in columns]


def _by_hand(batched, columns: list[np.ndarray], offsets: np.ndarray, weights: np.ndarray) -> np.ndarray:
    total = sum(w * a for w, a in zip(weights, _separate_calls(batched, columns, offsets), strict=True))
    return (total - total.mean()) / (total.std(ddof=1) + 1e-6)


def run(quick: bool = False) -> Report:
    """Time both aggregations against separate calls at each size and number of reward functions."""
    sizes = [4_096] if quick else [16_384, 131_072, 1_048_576]
    counts = [2] if quick else [1, 2, 3, 4]
    rounds, budget = (1, 0.0) if quick else (3, 0.6)
    rng = np.random.default_rng(0)
    report = Report("multi_objective")
    table = Table(
        f"Several reward functions (groups of {GROUP_SIZE}): the (N, F) path vs F separate estimator calls",
        COLUMNS,
    )
    table.notes.append(
        "F calls + sum + whitening: the estimator's batched form on each column (already contiguous), the weighted sum and "
        "(s - mean) / (sample std + 1e-6) in numpy; bare F calls: the calls alone. normalize_then_sum adds validation and "
        "the column copies to the first."
    )
    table.notes.append("1 call on the sum: the estimator on a precomputed weighted sum; sum_then_normalize adds validation and the sum.")
    table.notes.append(
        "The (N, F) table is in Fortran order, as the TRL and verl adapters build it; a C-order table costs one transposed copy "
        "more (about 50 ms for 1M x 4 float64 on this machine)."
    )
    worst: dict[int, float] = {}
    for estimator_name in ESTIMATORS:
        batched = get_estimator(estimator_name).batched_form
        for f_count in counts:
            for n in sizes:
                table_nf = rng.integers(0, 3, size=(n, f_count)).astype(np.float64) + rng.normal(0.0, 0.1, size=(n, f_count))
                table_nf = np.asfortranarray(table_nf)  # as the adapters build it: each function's column contiguous
                weights = np.linspace(1.0, 0.5, f_count)
                offsets = np.arange(0, n + 1, GROUP_SIZE, dtype=np.int64)
                columns = [np.ascontiguousarray(table_nf[:, f]) for f in range(f_count)]
                combined = table_nf @ weights
                ours = normalize_then_sum(table_nf, offsets, batched, weights=weights)
                if not np.allclose(ours, _by_hand(batched, columns, offsets, weights), rtol=1e-9, atol=1e-9):
                    raise AssertionError(f"{estimator_name}, F={f_count}: normalize_then_sum differs from the numpy computation")
                if not np.allclose(sum_then_normalize(table_nf, offsets, batched, weights=weights), batched(combined, offsets), rtol=1e-9, atol=1e-9):
                    raise AssertionError(f"{estimator_name}, F={f_count}: sum_then_normalize differs from one call on the sum")
                t = measure_interleaved(
                    {
                        "hand": partial(_by_hand, batched, columns, offsets, weights),
                        "calls": partial(_separate_calls, batched, columns, offsets),
                        "nts": partial(normalize_then_sum, table_nf, offsets, batched, weights=weights),
                        "one": partial(batched, combined, offsets),
                        "stn": partial(sum_then_normalize, table_nf, offsets, batched, weights=weights),
                    },
                    rounds,
                    budget,
                    1 if quick else 3,
                )
                ratio = t["nts"] / t["hand"]
                table.add(
                    estimator_name, f_count, f"{n:,}", format_time(t["hand"]), format_time(t["nts"]), format_ratio(ratio),
                    format_time(t["calls"]), format_ratio(t["nts"] / t["calls"]),
                    format_time(t["one"]), format_time(t["stn"]), format_ratio(t["stn"] / t["one"]),
                )  # fmt: skip
                if n == max(sizes):
                    worst[f_count] = max(worst.get(f_count, 0.0), ratio)
    report.tables.append(table)
    for f_count, ratio in sorted(worst.items()):
        name = f"normalize_then_sum vs {f_count} separate call(s) + sum + whitening, {max(sizes):,} rows (slowest of {', '.join(ESTIMATORS)})"
        report.targets.append(Target.check(name, ratio, TARGET_RATIO, quick=quick))
    return report


def main() -> None:
    script_main(__doc__, run, "one small size, one run each (smoke test)")


if __name__ == "__main__":
    main()
