"""How a ``torchrun`` worker of these tests ends: :func:`leave`."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

__all__ = ["leave"]


def leave(run: Callable[[], None]) -> None:
    """Run, then leave without tearing down, also after an error: torch's gloo group joins its worker thread while holding
    the GIL, and that thread may still need the GIL to free a finished all-gather's tensors (a hang, or an abort)."""
    code = 0
    try:
        run()
    except BaseException:
        sys.excepthook(*sys.exc_info())  # torch's hook: each line prefixed with its rank
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
