"""The (B, T) passes of verl's outcome path: the token rewards read once, the mask at most once, the output written once.

Every check around the estimator (empty masks, verl's padding groups, finiteness, representability) works on the
(B,) vectors these functions return; nothing else in the outcome path touches a (B, T) tensor. ``tests/benchmarks/
test_pass_counts.py`` counts the (B, T) operations of each common path.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["check_has_tokens", "empty_output", "mask_lengths", "reward_sums", "rows_with_tokens", "write_advantages"]

_HALF = (torch.float16, torch.bfloat16)
_BLOCK_BYTES = 1 << 20  # output rows written per block: 1 MiB (the mask block cast in stays cached; fewer calls than 256 KiB: measured faster)
_NUMPY_DTYPES = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64}
_FULL_SCAN = 8  # more than 1/8 of the rows without a token in column 0: scan the whole mask once instead of those rows


def reward_sums(token_level_rewards: torch.Tensor) -> np.ndarray:
    """``token_level_rewards.sum(-1)`` (B,) as float64 numpy, exact to the input's precision: one read of the rewards.

    16-bit floats are summed in float64 (in their own dtype, bf16 rows 10.0098 and 10.0198 both
    round to 10.0, and fp16 overflows past 65504). float32 is summed in float32 by torch's
    cascade summation (relative error ~1e-7 · log2(T), the inputs' own precision; float64
    accumulation would cost 5-25x the whole estimator on CPU); integers and float64 exactly.
    """
    x = token_level_rewards
    summed = x.sum(dim=-1, dtype=torch.float64) if x.dtype in _HALF else x.sum(dim=-1)
    return summed.to(device="cpu", dtype=torch.float64).numpy()


def mask_lengths(response_mask: torch.Tensor) -> np.ndarray:
    """``response_mask.sum(-1)`` (B,) float64: each row's model tokens (one read of the mask; only for estimators that take ``lengths``)."""
    return reward_sums(response_mask)


def rows_with_tokens(response_mask: torch.Tensor) -> np.ndarray:
    """``(B,)`` bool: whether each row has a non-zero ``response_mask`` entry, without reading the whole mask in the usual case.

    verl's responses begin with a model token, so column 0 (B values) settles almost every row; only the rows
    whose first entry is 0 (verl's padding rows, empty responses) are read in full. When more than 1/8 of the
    rows need that, the whole mask is read once instead (no (B, T) temporary).
    """
    rows, length = response_mask.shape
    if length == 0:
        return np.zeros(rows, dtype=bool)
    has = (response_mask[:, 0] != 0).cpu().numpy()
    rest = np.flatnonzero(~has)
    if rest.size == 0:
        return has
    if rest.size * _FULL_SCAN > rows:
        return _nonzero_rows(response_mask)
    has[rest] = _nonzero_rows(response_mask.index_select(0, torch.from_numpy(rest).to(response_mask.device)))
    return has


def check_has_tokens(where: str, has_tokens: np.ndarray) -> None:
    """Raise ``ValueError`` when no row has a model token (``has_tokens`` (B,) bool, :func:`rows_with_tokens`)."""
    if has_tokens.size > 0 and not has_tokens.any():
        raise ValueError(f"{where}: response_mask is all zero over {has_tokens.size} rows; every advantage would be masked out")


def _nonzero_rows(x: torch.Tensor) -> np.ndarray:
    """``(x != 0).any(-1)`` (R,) bool in one read of ``x`` (R, T), T > 0: a row's extremes are both 0 only when the row is.

    torch's ``any`` over rows is 3-5x a row sum on CPU, and ``x != 0`` would allocate an (R, T) bool.
    """
    if x.dtype in (torch.bool, torch.uint8):
        return (x.amax(dim=-1) != 0).cpu().numpy()
    low, high = torch.aminmax(x, dim=-1)
    return ((low != 0) | (high != 0)).cpu().numpy()


def empty_output(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An uninitialised ``(B, T)`` output; on the CPU in memory numpy allocates (bf16: torch's).

    numpy advises huge pages for large buffers (Linux), so the first write faults once per 2 MiB; torch's
    allocator maps a block past glibc's mmap threshold (32 MiB at most) afresh on every call, and its first
    write faults once per 4 KiB page: at 4,096 x 2,048 float32, 8,193 faults, more time than the write itself.
    """
    if device.type != "cpu" or dtype not in _NUMPY_DTYPES:
        return torch.empty(shape, dtype=dtype, device=device)
    return torch.from_numpy(np.empty(shape, dtype=_NUMPY_DTYPES[dtype]))


def write_advantages(per_row: np.ndarray, response_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``per_row[:, None] * response_mask`` (B, T) in ``dtype`` on the mask's device: one read of the mask, one write to memory.

    ``per_row`` (B,) float64. On the CPU the output is filled in blocks of rows that stay in cache: the mask block cast
    into it, then scaled in place. torch's ``per_row[:, None] * mask`` with an integer mask first casts the whole mask
    into a (B, T) temporary (twice the memory traffic: measured 1.5-2x the time at 16M-32M output bytes), and
    ``mul(out=)`` of another result dtype computes into a temporary and copies it.
    """
    scale = torch.from_numpy(per_row).to(device=response_mask.device, dtype=dtype).unsqueeze(-1)
    out = empty_output(tuple(response_mask.shape), dtype, response_mask.device)
    if response_mask.device.type != "cpu" or torch.promote_types(dtype, response_mask.dtype) != dtype:  # a wider float mask: multiplied in its dtype
        return torch.mul(scale, response_mask, out=out)
    rows, length = response_mask.shape
    block = max(1, _BLOCK_BYTES // max(1, length * out.element_size()))
    for first in range(0, rows, block):
        part = out[first : first + block]
        part.copy_(response_mask[first : first + block])
        part.mul_(scale[first : first + block])
    return out
