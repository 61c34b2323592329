"""The demo's kernel pinning (``examples/demo/kernels.py``, one implementation) for the recipes run as scripts."""

from __future__ import annotations

import sys
from pathlib import Path


def pin_demo_kernels() -> None:
    """Pin torch's and MKL's kernels and the thread count as the demo does; call it before torch loads."""
    demo = str(Path(__file__).resolve().parents[1] / "demo")
    sys.path.insert(0, demo)
    try:
        from kernels import pin_kernels
    finally:
        sys.path.remove(demo)
    pin_kernels()
