"""Option checks the step-level estimators share: a discount, a choice among names, a std's degrees of freedom."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..calling import describe, is_finite_real

__all__ = ["check_choice", "check_discount", "check_std_ddof"]


def check_discount(name: str, gamma: object) -> float:
    """``gamma`` must be a real number in [0, 1]."""
    if not is_finite_real(gamma) or not 0.0 <= float(gamma) <= 1.0:  # type: ignore[arg-type]
        raise ValueError(f"estimator {name!r}: gamma (the discount of step returns) must be a number in [0, 1], got {describe(gamma)}")
    return float(gamma)


def check_choice(name: str, options: Mapping[str, Any], key: str, choices: Sequence[str]) -> None:
    """``options[key]``, when given, must be one of ``choices``."""
    if key in options and options[key] not in choices:
        raise ValueError(f"estimator {name!r}: {key} must be one of {list(choices)}, got {options[key]!r}")


def check_std_ddof(name: str, options: Mapping[str, Any]) -> None:
    """``options["std_ddof"]``, when given, must be 0 (population std) or 1 (unbiased std)."""
    ddof = options.get("std_ddof", 0)
    if isinstance(ddof, bool) or ddof not in (0, 1):
        raise ValueError(f"estimator {name!r}: std_ddof must be 0 (population std) or 1 (unbiased std), got {ddof!r}")
