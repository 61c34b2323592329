"""Estimator names: how a name (a str or an enum member) becomes its registry key."""

from __future__ import annotations

import re
from enum import Enum

__all__ = ["normalize_name", "validate_name"]

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def normalize_name(name: object) -> str:
    """Registry key of ``name``: an enum's value, lower-cased and stripped. Does not validate."""
    if isinstance(name, Enum):
        name = name.value
    if not isinstance(name, str):
        raise TypeError(f"an estimator name must be a str or rLLMAdvantageEstimator, got {type(name).__name__}: {name!r}")
    return name.strip().lower()


def validate_name(name: object, where: str = "") -> str:
    """Normalise ``name`` and check it is ``[a-z][a-z0-9_]*``; ``where`` names the source in the error."""
    key = normalize_name(name)
    if not _NAME_RE.match(key):
        origin = f" (from {where})" if where else ""
        raise ValueError(f"invalid estimator name {name!r}{origin}: names are lower case letters, digits and '_', starting with a letter")
    return key
