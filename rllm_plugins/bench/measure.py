"""What ``rllm-plugins bench`` counts besides time: passes over ``(B, T)`` tensors, host<->device copies and peak memory.

- :func:`passes_mode`: every torch operation of a call, recorded by a ``TorchDispatchMode`` (views excluded): the elements it
  reads from and writes to each storage, divided by B * T, is the number of passes over each named ``(B, T)`` tensor (the
  token rewards, the mask, the output); a copy between devices is counted with its bytes. numpy's work is not seen.
- :func:`peak_extra_memory`: bytes allocated by a call beyond what existed before it: on the CPU torch's allocations from
  the torch profiler (each op's allocations and frees replayed in order) plus numpy's from ``tracemalloc``; on a CUDA
  device ``torch.cuda.max_memory_allocated`` (plus ``tracemalloc`` for the host's numpy).
"""

from __future__ import annotations

import tracemalloc
from collections import Counter
from collections.abc import Callable
from typing import Any

__all__ = ["count_passes", "passes_mode", "peak_bytes", "peak_extra_memory"]


def _storage(t: Any) -> int:
    return t.untyped_storage().data_ptr()


def passes_mode(numel: int) -> Any:
    """A ``TorchDispatchMode`` recording the elements read from and written to each storage during a ``with`` block, and the
    copies between devices; ``.passes(name=tensor, ...)`` divides each named tensor's by ``numel`` (B * T)."""
    return _passes_class()(numel)


_PASSES: list[type] = []


def _passes_class() -> type:
    """The mode's class, made on first use (torch is imported only then)."""
    if _PASSES:
        return _PASSES[0]
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    factories = (torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default)  # allocate, write nothing
    gathers = (torch.ops.aten.index_select.default, torch.ops.aten.index.Tensor)  # read only the rows they return
    copies = (torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default, torch.ops.aten._copy_from.default)  # what moves data between devices

    class Passes(TorchDispatchMode):
        def __init__(self, numel: int) -> None:
            super().__init__()
            self.numel = numel
            self.read: Counter[int] = Counter()
            self.written: Counter[int] = Counter()
            self.copies: list[tuple[str, str, int]] = []  # (from device, to device, bytes)
            self.kept: list[Any] = []

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            if func.is_view:
                return out
            inputs = [t for t in tree_leaves((args, kwargs or {})) if isinstance(t, torch.Tensor)]
            outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
            in_place = func._schema.name.endswith("_") and func is not torch.ops.aten.copy_.default
            if func in gathers:
                self.read[_storage(inputs[0])] += sum(o.numel() for o in outputs)
            else:
                for t in inputs:
                    if in_place or not any(t is o for o in outputs):
                        self.read[_storage(t)] += t.numel()
            devices = {t.device for t in inputs}
            for o in outputs:
                if func not in factories:
                    self.written[_storage(o)] += o.numel()
                    source = next((d for d in devices if d != o.device), None) if func in copies else None  # a CPU scalar in a CUDA op moves nothing
                    if source is not None and (source.type == "cpu") != (o.device.type == "cpu"):
                        self.copies.append((str(source), str(o.device), o.numel() * o.element_size()))
            self.kept.extend(outputs)  # alive until the end: no later tensor reuses a storage address
            return out

        def passes(self, **tensors: Any) -> dict[str, float]:
            """``{"<name> read": passes, "<name> written": passes}`` for each named ``(B, T)`` tensor."""
            out: dict[str, float] = {}
            for name, t in tensors.items():
                out[f"{name} read"] = round(self.read[_storage(t)] / self.numel, 3)
                out[f"{name} written"] = round(self.written[_storage(t)] / self.numel, 3)
            return out

    _PASSES.append(Passes)
    return Passes


def count_passes(call: Callable[[], object], numel: int, tensors: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Passes of ``call()`` over the ``(B, T)`` tensors ``tensors()`` names after it (``numel`` = B * T elements each), and its
    host<->device copies: ``{"rewards read": ..., ..., "copies": n, "copied bytes": n}``."""
    import torch

    with torch.no_grad(), passes_mode(numel) as mode:
        call()
    counted: dict[str, Any] = mode.passes(**tensors())
    counted["copies"] = len(mode.copies)
    counted["copied bytes"] = sum(n for *_, n in mode.copies)
    return counted


def peak_bytes(fn: Callable[[], object]) -> int:
    """Peak bytes ``tracemalloc`` traces during ``fn()`` (numpy's buffers and Python objects; torch's are not seen)."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def peak_extra_memory(fn: Callable[[], object], device: str = "cpu") -> tuple[int, int]:
    """``(peak, retained)`` bytes allocated by ``fn()`` beyond what existed before it (torch + numpy; see the module docstring).

    torch's profiler gives each op its own net change (``self_cpu_memory_usage``); an op that frees what its children
    allocated (``mul`` freeing the cast ``_to_copy`` made of an integer mask) has a negative one, counted at its end.
    """
    if device.startswith("cuda"):
        return _cuda_peak(fn, device)
    from torch.profiler import ProfilerActivity, profile

    tracemalloc.start()
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn()
        numpy_current, numpy_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    changes = []  # an op's own net change: an allocation dated at its start, a free at its end (after the children it frees)
    for event in prof.events():
        delta = event.cpu_memory_usage if event.name == "[memory]" else event.self_cpu_memory_usage
        if delta:
            changes.append((event.time_range.start if delta > 0 else event.time_range.end, delta))
    running = peak = 0
    for _, delta in sorted(changes):
        running += delta
        peak = max(peak, running)
    return peak + numpy_peak, running + numpy_current


def _cuda_peak(fn: Callable[[], object], device: str) -> tuple[int, int]:
    import torch

    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    tracemalloc.start()
    try:
        fn()
        torch.cuda.synchronize(device)
        numpy_current, numpy_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    peak = torch.cuda.max_memory_allocated(device) - before
    return peak + numpy_peak, torch.cuda.memory_allocated(device) - before + numpy_current
