"""The one rule for what an estimator may return, used by the collector, the derived forms and both adapters.

Advantages (a batched form's output, or one group's entry of a list form's output) may be:

- a numpy array or a torch tensor of real numbers, of any dtype (bool, int, float16, bfloat16,
  float32, float64), on any device, with or without ``requires_grad``: detached, moved to the CPU
  and converted to float64;
- a Python number (one trajectory);
- any other iterable (list, tuple, generator, ...) of real numbers or one-element arrays/tensors.

Arrays of more than one dimension are flattened (C order). A list form's ``advantages_by_group``
may be any iterable of such entries (a generator, a 2-D array: one row per group). Anything else
(None, a str, a mapping, a set (no order), complex numbers, objects) is a ``ValueError`` naming
the estimator; a masked entry of a masked array becomes NaN, which the caller refuses.
Sizes and finiteness are checked by the caller, which knows the groups.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

__all__ = ["as_advantages", "as_groups"]

_REAL_KINDS = frozenset("biuf")
_UNORDERED = (str, bytes, Mapping, set, frozenset)  # a str is no sequence of numbers; a set has no order to align with


def _is_tensor(value: Any) -> bool:
    return type(value).__module__.partition(".")[0] == "torch" and hasattr(value, "detach") and hasattr(value, "numpy")


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _refuse(value: Any, who: str) -> ValueError:
    return ValueError(f"{who} returned {_describe(value)}; advantages must be a sequence, numpy array or torch tensor of real numbers")


def _tensor_to_numpy(value: Any, who: str) -> np.ndarray:
    if value.is_complex():
        raise _refuse(value, who)
    try:
        return value.detach().to(device="cpu").to_dense().double().numpy()
    except (RuntimeError, TypeError, NotImplementedError):  # a meta or nested tensor: no values to read
        raise _refuse(value, who) from None


def as_advantages(value: Any, who: str) -> np.ndarray:
    """``value`` as a float64 ``(n,)`` array under the rule above; ``who`` names the estimator in the error."""
    if isinstance(value, np.ndarray):
        if type(value) is not np.ndarray:  # a subclass: a masked entry becomes NaN (refused by the caller), a matrix an array
            value = np.ma.filled(value.astype(np.float64), np.nan) if np.ma.isMaskedArray(value) else np.asarray(value)
        if value.dtype.kind in _REAL_KINDS:
            return value.astype(np.float64, copy=False).reshape(-1)
        if value.dtype.kind != "O":
            raise _refuse(value, who)
        return np.array([_scalar(v, value, who) for v in value.reshape(-1).tolist()], dtype=np.float64)
    if _is_tensor(value):
        return _tensor_to_numpy(value, who).reshape(-1)
    if isinstance(value, (numbers.Real, np.bool_)):
        return np.array([_scalar(value, value, who)], dtype=np.float64)
    if isinstance(value, _UNORDERED) or not isinstance(value, Iterable):
        raise _refuse(value, who)
    items = list(value)
    return np.array([_scalar(v, items, who) for v in items], dtype=np.float64)


def _scalar(item: Any, whole: Any, who: str) -> float:
    """One element of an advantages sequence: a real number or a one-element array/tensor."""
    if isinstance(item, (numbers.Real, np.bool_)):
        try:
            return float(item)
        except OverflowError:  # an int beyond the float range
            raise _refuse(whole, who) from None
    if isinstance(item, np.ndarray) and item.size == 1 and item.dtype.kind in _REAL_KINDS:
        return float(item.reshape(-1)[0])
    if _is_tensor(item) and item.numel() == 1:
        return float(_tensor_to_numpy(item, who).reshape(-1)[0])
    raise _refuse(whole, who)


def as_groups(value: Any, who: str) -> list[Any]:
    """A list form's ``advantages_by_group`` (any iterable of per-group advantages) as a list."""
    if isinstance(value, _UNORDERED) or not isinstance(value, Iterable) or getattr(value, "ndim", None) == 0:  # a 0-d array or tensor
        raise ValueError(f"{who} returned advantages_by_group {_describe(value)}; it must be a sequence with one entry per group")
    return list(value)
