"""The demo's numbers on any x86-64 CPU: one kernel set, one thread, pinned before torch loads.

Training a tiny model for dozens of steps is chaotic: a last-bit difference in a matrix product
grows into a different run. torch picks its ATen kernels (AVX-512, AVX2 or plain) and MKL its GEMM
code path by the CPU it finds, and splits reductions by thread count, so an Intel and an AMD VM
printed different rows. Pinned here: ATen's portable kernels (``ATEN_CPU_CAPABILITY=default``),
MKL's conditional numerical reproducibility in its code path common to all x86-64 CPUs
(``MKL_CBWR=COMPATIBLE``), and one thread, so every x86-64 CPU computes the same bits.
"""

from __future__ import annotations

import os
import sys

__all__ = ["PINNED_KERNELS", "pin_kernels"]

PINNED_KERNELS = {
    "ATEN_CPU_CAPABILITY": "default",  # torch's kernels compiled for the x86-64 baseline, not chosen by CPU
    "MKL_CBWR": "COMPATIBLE",  # MKL's results the same on every Intel and AMD x86-64 CPU
    "OMP_NUM_THREADS": "1",  # ATen's and MKL's reductions are split by thread count
    "MKL_NUM_THREADS": "1",
}


def pin_kernels() -> None:
    """Set :data:`PINNED_KERNELS` in the environment; torch reads them once, when it loads.

    Raises ``RuntimeError`` when torch is already loaded with other values: they would not take effect.
    """
    if "torch" in sys.modules and any(os.environ.get(key) != value for key, value in PINNED_KERNELS.items()):
        pinned = " ".join(f"{key}={value}" for key, value in PINNED_KERNELS.items())
        raise RuntimeError(f"torch was loaded before the demo could pin its kernels; run the demo as a script, or set {pinned} before torch loads")
    os.environ.update(PINNED_KERNELS)
