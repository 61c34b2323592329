"""The (B, T) passes of the outcome path give what the plain torch expressions give, on every mask the path may meet."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

from rllm_verl.compute.tokens import mask_lengths, reward_sums, rows_with_tokens, write_advantages


def _masks() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(0, 50, (40,), generator=g)
    right_padded = (torch.arange(50).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.int64)
    multi_turn = (torch.rand(40, 50, generator=g) < 0.3).to(torch.int64)  # many rows with column 0 empty: the whole-mask scan
    few_late = right_padded.clone()
    few_late[[3, 17], 0] = 0  # two rows starting later: only those are read in full
    few_late[3, 40] = 1
    weights = torch.rand(40, 50, generator=g) * right_padded - 0.5 * (torch.arange(50) == 7)  # negative entries: nonzero
    with_nan = weights.clone()
    with_nan[5] = 0
    with_nan[5, 9] = float("nan")
    return [
        right_padded,
        multi_turn,
        few_late,
        few_late.bool(),
        few_late.to(torch.uint8),
        few_late.to(torch.int32),
        weights,
        with_nan,
        weights.double(),
        right_padded.t().contiguous().t(),  # column-major storage
        torch.zeros(40, 50, dtype=torch.int64),
        torch.zeros(40, 0, dtype=torch.int64),
        torch.zeros(0, 50, dtype=torch.int64),
    ]


@pytest.mark.parametrize("mask", _masks(), ids=lambda m: f"{m.dtype}-{tuple(m.shape)}")
def test_rows_with_tokens_is_any_nonzero_entry(mask: torch.Tensor) -> None:
    expected = (mask != 0).any(dim=-1).numpy() if mask.shape[1] else np.zeros(mask.shape[0], dtype=bool)
    got = rows_with_tokens(mask)
    assert got.dtype == bool and np.array_equal(got, expected)


@pytest.mark.parametrize("mask", _masks(), ids=lambda m: f"{m.dtype}-{tuple(m.shape)}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_write_advantages_is_the_per_row_value_times_the_mask_in_the_output_dtype(mask: torch.Tensor, dtype: torch.dtype) -> None:
    per_row = np.random.default_rng(1).normal(size=mask.shape[0]) * 3
    expected = torch.mul(torch.from_numpy(per_row).to(dtype).unsqueeze(-1), mask, out=torch.empty(mask.shape, dtype=dtype))
    got = write_advantages(per_row, mask, dtype)
    assert got.dtype == dtype and got.shape == mask.shape
    assert torch.equal(got.isnan(), expected.isnan())
    assert torch.equal(got.nan_to_num(), expected.nan_to_num())


def test_write_advantages_blocks_cover_every_row_of_a_long_batch() -> None:
    from pathlib import Path

    from rllm_verl.compute.tokens import _BLOCK_BYTES

    page = (Path(__file__).resolve().parents[3] / "docs" / "benchmarks.md").read_text()
    assert f"blocks of rows of {_BLOCK_BYTES >> 20} MiB" in page  # what docs/benchmarks.md says of the blocks
    rows = 2 * _BLOCK_BYTES // (37 * 4) + 5  # two blocks of float32 rows and a partial third
    mask = torch.ones(rows, 37, dtype=torch.int64)
    per_row = np.arange(rows, dtype=np.float64)
    assert torch.equal(write_advantages(per_row, mask, torch.float32), torch.arange(rows, dtype=torch.float32).unsqueeze(-1).expand(rows, 37))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64])
def test_sums_are_the_row_sums_in_float64(dtype: torch.dtype) -> None:
    x = (torch.arange(6 * 9).reshape(6, 9) % 5).to(dtype)
    expected = x.double().sum(dim=-1).numpy()
    assert reward_sums(x).dtype == np.float64 and np.array_equal(reward_sums(x), expected)
    assert np.array_equal(mask_lengths(x), expected)


FAULTS = """
import json, resource, sys
import numpy as np, torch
from rllm_verl.compute.tokens import write_advantages

mask = torch.ones(4096, 2048, dtype=torch.int64)
per_row = np.ones(4096)
if sys.argv[1] == "torch":  # what torch's own allocation costs: the control
    import rllm_verl.compute.tokens as tokens
    tokens.empty_output = lambda shape, dtype, device: torch.empty(shape, dtype=dtype, device=device)
faults = []
for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    out = write_advantages(per_row, mask, torch.float32)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    del out
print(json.dumps(faults))
"""


def _huge_pages_advised() -> bool:
    from pathlib import Path

    setting = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    core = np._core if hasattr(np, "_core") else np.core  # numpy 2 renamed it
    madvise = core.multiarray._get_madvise_hugepage()
    return madvise and setting.exists() and "[never]" not in setting.read_text()


@pytest.mark.skipif(not _huge_pages_advised(), reason="numpy advises no huge pages here (transparent huge pages off)")
def test_the_cpu_output_is_written_without_a_page_fault_per_4_kib() -> None:
    """A (4,096, 2,048) float32 output is 32 MiB, past glibc's largest mmap threshold: each call maps it afresh. In numpy's
    memory (huge pages advised) its first write faults about once per 2 MiB; in torch's, once per 4 KiB page (the control)."""
    import json
    import subprocess
    import sys

    def faults(mode: str) -> list[int]:
        return json.loads(subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, check=True).stdout)

    pages = 4096 * 2048 * 4 // 4096
    assert min(faults("torch")) >= pages  # the control: the test can tell the two apart
    assert max(faults("numpy")[1:]) < pages // 8
