"""What a stateful estimator is handed and what it hands back, so that a call costs what its batch costs.

The owner never copies a whole state per call. The estimator gets the state's top level as a new
``dict`` (it may set keys on it), whose nested mappings and lists are **read-only views**
(:class:`StateView`) of what the owner keeps: reading a key costs a lookup, and an attempt to change
a view raises ``TypeError`` (the estimator then fails and the kept state is as it was). To change a
few keys of a large mapping, an estimator returns :func:`updated` ``(view, changes)``: a mapping that
reads as the view with ``changes`` on top, while holding only the changes.

At the boundary (:func:`absorb`) the new state is checked where it is new: plain values in full,
an :class:`Updated` by its changes, a view not at all (it is what the owner kept, checked when it was
stored). :func:`materialise` then turns the checked new state into what the owner keeps: views back
into the data they show, an :class:`Updated` applied in place to its base (a mapping the owner keeps
only for this key), so a commit costs the changes, too.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any

import numpy as np

__all__ = ["StateView", "Updated", "absorb", "materialise", "updated", "view_of"]

_SCALARS = {float, int, bool, str, type(None)}


class StateView(Mapping[str, Any]):
    """A read-only view of a kept mapping: nested mappings and lists come back as views too."""

    __slots__ = ("_data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return view_of(self._data[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: str, default: Any = None) -> Any:
        return view_of(self._data.get(key, default))

    def get_many(self, keys: Iterable[str], default: Any = None) -> list[Any]:
        """``[self.get(key, default) for key in keys]`` in one C-level pass where the values are plain scalars."""
        out = list(map(self._data.get, keys, repeat(default)))
        return out if set(map(type, out)) <= _SCALARS else [view_of(v) for v in out]

    def __repr__(self) -> str:
        return f"StateView({self._data!r})"


class ListView(Sequence[Any]):
    """A read-only view of a kept list."""

    __slots__ = ("_data",)

    def __init__(self, data: list[Any]) -> None:
        self._data = data

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [view_of(v) for v in self._data[index]]
        return view_of(self._data[index])

    def __len__(self) -> int:
        return len(self._data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (list, tuple, ListView)) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ListView({self._data!r})"


def view_of(value: Any) -> Any:
    """``value`` as the estimator sees it: a kept dict or list as a read-only view, anything else as is."""
    if isinstance(value, dict):
        return StateView(value)
    if isinstance(value, list):
        return ListView(value)
    return value


class Updated(Mapping[str, Any]):
    """``base`` (a :class:`StateView`) with ``changes`` on top; holds only the changes."""

    __slots__ = ("base", "changes")

    def __init__(self, base: StateView, changes: dict[str, Any]) -> None:
        self.base = base
        self.changes = changes

    def __getitem__(self, key: str) -> Any:
        return self.changes[key] if key in self.changes else self.base[key]

    def __iter__(self) -> Iterator[str]:
        yield from self.base
        yield from (key for key in self.changes if key not in self.base)

    def __len__(self) -> int:
        return len(self.base) + sum(key not in self.base for key in self.changes)

    def __contains__(self, key: object) -> bool:
        return key in self.changes or key in self.base

    def __repr__(self) -> str:
        return f"Updated({len(self.changes)} changes over {len(self.base)} keys)"


def updated(base: Mapping[str, Any], changes: dict[str, Any]) -> Mapping[str, Any]:
    """``base`` with ``changes`` on top, as a new state's value: O(changes) for a view, a new dict otherwise.

    ``changes`` becomes part of the result (not copied): pass a dict the caller does not use afterwards.
    """
    if isinstance(base, StateView):
        return Updated(base, changes)
    if isinstance(base, Updated):
        return Updated(base.base, {**base.changes, **changes})
    return {**base, **changes} if base else changes


def absorb(value: Any, who: str, path: str, *, top: bool = False) -> Any:
    """``value`` checked as plain data where it is new (views trusted, an :class:`Updated` by its changes); ``ValueError`` naming ``who`` and ``path``."""
    if isinstance(value, (StateView, ListView)):
        return value
    if isinstance(value, Updated):
        return Updated(value.base, _mapping(value.changes, who, path))
    if top and not isinstance(value, Mapping):
        raise ValueError(f"{who}: {path} must be a mapping (a dict of plain data), got {type(value).__name__} {value!r}")
    return _plain(value, who, path)


def _mapping(state: Mapping[Any, Any], who: str, path: str) -> dict[str, Any]:
    if len(state) > 64 and _flat_plain(state):  # a large flat mapping (a baseline per task): C-level checks
        return dict(state)
    for key in state:
        if not isinstance(key, str):
            raise ValueError(f"{who}: {path} has the key {key!r} ({type(key).__name__}); state keys must be str, so that it saves as JSON")
    return {key: absorb(value, who, f"{path}[{key!r}]") for key, value in state.items()}


def _flat_plain(state: Mapping[Any, Any]) -> bool:
    """Whether ``state`` has str keys and Python float / int / str / bool / None values, the floats finite (no per-value Python calls)."""
    try:
        "".join(state)
    except TypeError:
        return False
    values = list(state.values())
    kinds = set(map(type, values))
    if kinds == {float}:
        return bool(np.isfinite(np.fromiter(values, dtype=np.float64, count=len(values))).all())
    return kinds <= _SCALARS - {float}


def _plain(value: Any, who: str, path: str) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, np.bool_):
        return int(value)
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            raise ValueError(f"{who}: {path} is {value}; a state holds finite numbers")
        return float(value)
    if isinstance(value, Mapping):
        return _mapping(value, who, path)
    if isinstance(value, (list, tuple)):
        return [absorb(v, who, f"{path}[{i}]") for i, v in enumerate(value)]
    raise ValueError(
        f"{who}: {path} is a {type(value).__name__} ({value!r}); a state holds plain data only (str, int, float, bool, None, lists, dicts with str keys)"
    )


def materialise(value: Any, claimed: set[int]) -> Any:
    """What the owner keeps for an absorbed ``value``: views unwrapped, :class:`Updated` applied to its base in place.

    ``claimed`` holds the ids of the kept containers already placed by this commit: a container the
    new state places twice is copied the second time, so no two places share one.
    """
    if isinstance(value, (StateView, ListView)):
        return _claim(value._data, claimed)
    if isinstance(value, Updated):
        data = _claim(value.base._data, claimed)
        data.update((key, materialise(v, claimed)) for key, v in value.changes.items())
        return data
    if isinstance(value, dict):
        if len(value) > 64 and set(map(type, value.values())) <= _SCALARS:  # a large flat mapping: nothing to unwrap
            return value
        return {key: materialise(v, claimed) for key, v in value.items()}
    if isinstance(value, list):
        return [materialise(v, claimed) for v in value]
    return value


def _claim(data: Any, claimed: set[int]) -> Any:
    if id(data) in claimed:
        data = copy.deepcopy(data)
    claimed.add(id(data))
    return data
