"""The schema a stateful estimator may declare for its state (``AdvEstimatorSpec(state_schema=...)``).

A schema maps each key the state may hold to what its value is: ``float`` (a finite number; an int
is taken as a float), ``int``, ``str``, ``bool``, or :class:`MapOf` ``(value)`` (a mapping of str to
values of that kind). Every key is optional; a key the schema does not name is refused, so a state
of another layout (another option's, or a misspelt key) is never ignored and then overwritten.
``rae``'s: ``{"baseline": float, "task_baselines": MapOf(float)}``.

Checked when a state is loaded (in full) and at the estimator's boundary (what the call changed).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from .views import StateView, Updated

__all__ = ["MapOf", "StateSchema", "check_schema", "check_state_schema"]

KINDS = (float, int, str, bool)


@dataclass(frozen=True)
class MapOf:
    """A mapping of str keys (task ids, say) to values of kind ``value``."""

    value: Field


Field = Union[type, MapOf]  # noqa: UP007 - a runtime alias
StateSchema = Mapping[str, Field]


def check_schema(schema: Any, who: str) -> dict[str, Field]:
    """``schema`` as a dict, or ``ValueError`` naming ``who`` when it is not a mapping of str to a kind or :class:`MapOf`."""
    if not isinstance(schema, Mapping) or not all(isinstance(key, str) for key in schema):
        raise ValueError(f"{who}: state_schema must map state keys (str) to float, int, str, bool or MapOf(...), got {schema!r}")
    for key, field in schema.items():
        inner = field
        while isinstance(inner, MapOf):
            inner = inner.value
        if inner not in KINDS:
            raise ValueError(f"{who}: state_schema[{key!r}] is {field!r}; use float, int, str, bool or MapOf(one of them)")
    return dict(schema)


def check_state_schema(state: Mapping[str, Any], schema: StateSchema, where: str) -> None:
    """Raise ``ValueError`` (``where``, the key, what it should be) where ``state`` breaks ``schema``.

    A read-only view (what the owner already keeps) is not walked again; of an ``Updated`` mapping
    only the changes are checked.
    """
    for key, value in state.items():
        if key not in schema:
            raise ValueError(f"{where}: the state holds the key {key!r}, which this estimator's state does not have (its keys: {sorted(schema)})")
        _check(value, schema[key], f"{where}, key {key!r}")


def _check(value: Any, field: Field, where: str) -> None:
    if isinstance(value, StateView):
        return
    if isinstance(field, MapOf):
        if isinstance(value, Updated):
            value = value.changes
        if not isinstance(value, Mapping):
            raise ValueError(f"{where}: expected a mapping of str to {_name(field.value)}, got {type(value).__name__} {_short(value)}")
        if field.value is float and _all_finite_floats(value):  # a baseline per task: C-level checks
            return
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{where}: the key {k!r} is a {type(k).__name__}; keys must be str")
            _check(v, field.value, f"{where}[{k!r}]")
        return
    if field is float:
        ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)) and math.isfinite(value)
    elif field is int:
        ok = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    else:
        ok = isinstance(value, field)
    if not ok:
        raise ValueError(f"{where}: expected {_name(field)}, got {type(value).__name__} {_short(value)}")


def _all_finite_floats(mapping: Mapping[Any, Any]) -> bool:
    """Whether ``mapping`` has str keys and finite Python float values (checked without a Python call per value)."""
    try:
        "".join(mapping)
    except TypeError:
        return False
    values = list(mapping.values())
    return set(map(type, values)) <= {float} and bool(np.isfinite(np.fromiter(values, dtype=np.float64, count=len(values))).all())


def _name(field: Field) -> str:
    if isinstance(field, MapOf):
        return f"a mapping of str to {_name(field.value)}"
    return "a finite float" if field is float else f"a {field.__name__}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."
