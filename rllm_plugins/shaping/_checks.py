"""Option checks the built-in shapers share: one wording for a weight, a count and a flag."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["non_negative", "positive_int", "flag"]


def non_negative(name: str, value: Any) -> float:
    """``value`` as a float, refused unless a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not np.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {type(value).__name__} {value!r}")
    return float(value)


def positive_int(name: str, value: Any) -> int:
    """``value`` as an int, refused unless an int > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{name} must be an int > 0, got {type(value).__name__} {value!r}")
    return int(value)


def flag(name: str, value: Any) -> bool:
    """``value`` refused unless a bool (a str such as "false" is truthy)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)
