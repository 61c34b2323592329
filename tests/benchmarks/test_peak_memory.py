"""The benchmarks' peak memory sees a temporary that an op's child allocates and the op frees (torch's profiler, one call)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")

from benchmarks.verl_advantage import peak_extra_memory  # noqa: E402

ROWS, LENGTH = 512, 1024
BYTES = ROWS * LENGTH * 4  # one float32 (ROWS, LENGTH) tensor: 2 MiB
PYTHON = 64 << 10  # tracemalloc also counts the Python objects a call makes (the profiler's own, a list entry)


def measured(fn: Callable[[], object]) -> tuple[int, int]:
    peak_extra_memory(fn)  # the profiler's first use in a process allocates for itself
    return peak_extra_memory(fn)


def test_a_kept_output_is_both_the_peak_and_what_is_retained() -> None:
    kept = []
    peak, retained = measured(lambda: kept.append(torch.ones(ROWS, LENGTH)))
    assert BYTES <= retained <= peak <= BYTES + PYTHON


def test_the_cast_an_integer_mask_goes_through_counts_at_its_peak_and_is_not_retained() -> None:
    mask = torch.ones(ROWS, LENGTH, dtype=torch.int64)
    scale = torch.ones(ROWS, 1)
    out = torch.empty(ROWS, LENGTH)  # made before the call: the only extra memory is torch's float copy of the mask
    peak, retained = measured(lambda: torch.mul(scale, mask, out=out))
    assert BYTES <= peak <= BYTES + PYTHON
    assert retained <= PYTHON
