"""Estimators with memory: the state a stateful estimator carries across calls, and who keeps it.

A spec with ``stateful=True`` declares an estimator whose forms take one more keyword, ``state``
(what its previous call returned, ``{}`` on the first call), and return ``(result, new_state)``:

- batched form: ``batched(values, offsets, /, *, state, **kw) -> (advantages (N,), new_state)``;
- list form: ``fn(rewards, *, state, **kw) -> ((advantages_by_group, returns_by_group), new_state)``;

:class:`~.spec.AdvEstimatorSpec` derives either form from the other.

A state is plain data (a mapping with str keys whose values are str, int, float, bool, None,
lists or such mappings), so that every owner can copy it, save it as JSON and compare it. The
estimator gets a deep copy: mutating it changes nothing, and a call that raises leaves the state
as it was. Owners (one per run) keep one state per estimator name and role in an
:class:`EstimatorState`: the core's ``AlgorithmConfig``, the TRL mixin (identically on every
process) and verl's process that runs ``compute_advantage`` (:mod:`rllm_verl.estimator_state`).

``task_ids`` (str ``(N,)`` object array, in the estimator's row order, or None where no stable id
exists) is passed to stateful estimators that name it, so they can key their state by task.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = ["STATE_FORMAT", "EstimatorState", "call_stateful", "check_state"]

STATE_FORMAT = 1  # EstimatorState.state_dict()["format"]


def check_state(state: Any, who: str, path: str = "state") -> dict[str, Any]:
    """``state`` as a plain dict, or ``ValueError`` naming ``who`` and the first value at ``path`` that is not plain data."""
    if not isinstance(state, Mapping):
        raise ValueError(f"{who}: {path} must be a mapping (a dict of plain data), got {type(state).__name__} {state!r}")
    return {key: _plain(value, who, f"{path}[{key!r}]") for key, value in _items(state, who, path)}


def _items(state: Mapping[Any, Any], who: str, path: str) -> list[tuple[str, Any]]:
    for key in state:
        if not isinstance(key, str):
            raise ValueError(f"{who}: {path} has the key {key!r} ({type(key).__name__}); state keys must be str, so that it saves as JSON")
    return list(state.items())


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
        return check_state(value, who, path)
    if isinstance(value, (list, tuple)):
        return [_plain(v, who, f"{path}[{i}]") for i, v in enumerate(value)]
    raise ValueError(
        f"{who}: {path} is a {type(value).__name__} ({value!r}); a state holds plain data only (str, int, float, bool, None, lists, dicts with str keys)"
    )


def call_stateful(form: Callable[..., Any], state: Mapping[str, Any], who: str, *args: Any, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
    """Call a stateful form with a deep copy of ``state``; return ``(result, new_state)`` with ``new_state`` checked.

    Raises ``ValueError`` naming ``who`` when the form does not return a ``(result, new_state)`` pair.
    """
    out = form(*args, state=copy.deepcopy(dict(state)), **kwargs)
    if not isinstance(out, tuple) or len(out) != 2:
        raise ValueError(f"{who} is stateful and must return (result, new_state), got {type(out).__name__}")
    return out[0], check_state(out[1], who, "the new state")


class EstimatorState:
    """The states of the stateful estimators of one run: one per estimator name and role.

    ``get(name, role)`` is the state to hand to the next call (``{}`` at first); ``commit(updates)``
    stores several new states at once, after every call of a step succeeded. ``state_dict()`` is
    JSON-serialisable; ``load_state_dict`` restores it (replacing everything held).
    """

    def __init__(self) -> None:
        self._states: dict[str, dict[str, dict[str, Any]]] = {}

    def get(self, name: str, role: str) -> dict[str, Any]:
        return copy.deepcopy(self._states.get(name, {}).get(role, {}))

    def commit(self, updates: Mapping[tuple[str, str], Mapping[str, Any]]) -> None:
        for (name, role), state in updates.items():
            self._states.setdefault(name, {})[role] = check_state(state, f"estimator {name!r} for role {role!r}")

    def __bool__(self) -> bool:
        return bool(self._states)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EstimatorState) and self._states == other._states

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"EstimatorState({self._states!r})"

    def clear(self) -> None:
        self._states.clear()

    def state_dict(self) -> dict[str, Any]:
        """``{"format": 1, "estimators": {name: {role: state}}}``, a deep copy (plain data, JSON-serialisable)."""
        return {"format": STATE_FORMAT, "estimators": copy.deepcopy(self._states)}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Replace every state held by those of ``state_dict`` (from :meth:`state_dict`, or its JSON); ``ValueError`` if malformed."""
        if not isinstance(state_dict, Mapping) or state_dict.get("format") != STATE_FORMAT or not isinstance(state_dict.get("estimators"), Mapping):
            got = sorted(state_dict) if isinstance(state_dict, Mapping) else type(state_dict).__name__
            raise ValueError(f"load_state_dict: expected {{'format': {STATE_FORMAT}, 'estimators': {{name: {{role: state}}}}}} (from state_dict()), got {got}")
        states: dict[str, dict[str, dict[str, Any]]] = {}
        for name, roles in state_dict["estimators"].items():
            if not isinstance(name, str) or not isinstance(roles, Mapping):
                raise ValueError(f"load_state_dict: estimators[{name!r}] must map role names to states, got {type(roles).__name__}")
            states[name] = {}
            for role, state in roles.items():
                if not isinstance(role, str):
                    raise ValueError(f"load_state_dict: estimators[{name!r}] has a non-str role {role!r}")
                states[name][role] = check_state(state, "load_state_dict", f"estimators[{name!r}][{role!r}]")
        self._states = states

    def to_json(self) -> str:
        return json.dumps(self.state_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> EstimatorState:
        out = cls()
        out.load_state_dict(json.loads(text))
        return out
