"""Estimators with memory: the state a stateful estimator carries across calls, and who keeps it.

A spec with ``stateful=True`` declares an estimator whose forms take one more keyword, ``state``
(what its previous call returned, ``{}`` on the first call), and return ``(result, new_state)``:

- batched form: ``batched(values, offsets, /, *, state, **kw) -> (advantages (N,), new_state)``;
- list form: ``fn(rewards, *, state, **kw) -> ((advantages_by_group, returns_by_group), new_state)``;

:class:`~rllm_plugins.spec.AdvEstimatorSpec` derives either form from the other.

A state is plain data (a mapping with str keys whose values are str, int, float, bool, None,
lists or such mappings), so that every owner can save it as JSON and compare it. A call costs what
its batch costs (:mod:`.views`): the estimator gets the top level as a new dict and everything
below as read-only views, and returns a new state that may hold views (unchanged) and
:func:`~.views.updated` mappings (a few keys changed); only what is new is checked, against
the spec's ``state_schema`` too (:mod:`.schema`). Owners (one per run) keep one state per
estimator name and role in an :class:`EstimatorState`: the core's ``AlgorithmConfig``, the TRL mixin
(identically on every process) and verl's process that runs ``compute_advantage``
(:mod:`rllm_verl.compute.state`). New states are committed once every call of a step succeeded,
so a call that raises leaves the kept state as it was.

``state_dict()`` (the state file) records the format, each estimator's states by role, the options
they were made with (:func:`rllm_plugins.options.state_options`; a resume under other options is refused unless accepted)
and the code that made them (``provenance``: :func:`rllm_plugins.provenance.code_of` each estimator, with the
rllm-plugins version; a resume under other code is said, once, by :mod:`rllm_plugins.run`).

``task_ids`` (str ``(N,)`` object array, in the estimator's row order, or None where no stable id
exists) is passed to stateful estimators that name it, so they can key their state by task.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Collection, Mapping
from typing import Any

from .views import StateView, absorb, materialise, view_of

__all__ = ["ACCEPT_ENV", "accepted_from_env", "STATE_FORMAT", "EstimatorState", "call_stateful", "check_state", "compare_options"]

STATE_FORMAT = 2  # EstimatorState.state_dict()["format"]; format 1 (no "options") is still read
READABLE_FORMATS = (1, 2)
ACCEPT_ENV = "RLLM_PLUGINS_ACCEPT_CHANGED_STATE_OPTIONS"


def check_state(state: Any, who: str, path: str = "state") -> dict[str, Any]:
    """``state`` as a plain dict, or ``ValueError`` naming ``who`` and the first value at ``path`` that is not plain data."""
    return materialise(absorb(state, who, path, top=True), set())


def call_stateful(
    form: Callable[..., Any], state: Mapping[str, Any], who: str, *args: Any, schema: Mapping[str, Any] | None = None, **kwargs: Any
) -> tuple[Any, Any]:
    """Call a stateful form with ``state`` (its top level a new dict, the rest read-only views); return ``(result, new_state)``.

    ``new_state`` is checked where it is new (plain data; ``schema`` when given) and is ready for
    :meth:`EstimatorState.commit`. Raises ``ValueError`` naming ``who`` when the form does not
    return a ``(result, new_state)`` pair or tries to change the state it was given in place.
    """
    given = {key: view_of(value) for key, value in state.items()}  # views stay views; a kept dict or list becomes one
    try:
        out = form(*args, state=given, **kwargs)
    except (TypeError, AttributeError) as error:  # item assignment, or a dict/list method, on a read-only view
        if "StateView" in str(error) or "ListView" in str(error):
            raise ValueError(
                f"{who} tried to change the state it was given in place ({error}); return a new state instead (rllm_plugins.state.views.updated)"
            ) from None
        raise
    if not isinstance(out, tuple) or len(out) != 2:
        raise ValueError(f"{who} is stateful and must return (result, new_state), got {type(out).__name__}")
    new_state = absorb(out[1], who, "the new state", top=True)
    if schema is not None:
        from .schema import check_state_schema

        check_state_schema(new_state, schema, f"{who}, the new state")
    return out[0], new_state


def compare_options(name: str, recorded: Mapping[str, Any], current: Mapping[str, Any], accepted: Collection[str], source: str) -> None:
    """Raise ``ValueError`` for the first option of estimator ``name`` whose value differs from the state's, unless accepted."""
    for key in sorted(set(recorded) | set(current)):
        was, now = recorded.get(key, "<unset>"), current.get(key, "<unset>")
        if was == now or key in accepted or "*" in accepted:
            continue
        raise ValueError(
            f"estimator {name!r}: option {key!r} is {now!r} now, but the state {source} was made with {key}={was!r}. "
            f"Set it back to {was!r}, start from a fresh state (no state file), or accept the change deliberately: "
            f"load_state_dict(..., accept_changed_options=[{key!r}]) in the core, {ACCEPT_ENV}={key} in TRL and verl"
        )


class EstimatorState:
    """The states of the stateful estimators of one run: one per estimator name and role, with the options that made them.

    ``get(name, role)`` is the state to hand to the next call (``{}`` at first; a read-only view of
    what is kept, no copy); ``check_options(name, options)`` refuses options other than those the
    state was made with; ``commit(updates, options)`` stores several new states at once, after every
    call of a step succeeded, in time proportional to what changed. ``state_dict()`` is
    JSON-serialisable; ``load_state_dict`` restores it (replacing everything held).
    """

    def __init__(self) -> None:
        self._states: dict[str, dict[str, dict[str, Any]]] = {}
        self._options: dict[str, dict[str, Any]] = {}
        self._accepted: frozenset[str] = frozenset()
        self._source = "held"
        self._unchecked: set[tuple[str, str]] = set()  # loaded states not yet checked against their estimator's schema
        self._code: dict[str, dict[str, Any]] = {}  # name -> the code that made its states (plain data, rllm_plugins.provenance)
        self._code_unread: set[str] = set()  # loaded records not yet compared with the code that runs now (loaded_code)

    def get(self, name: str, role: str, schema: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
        """The state of ``name`` for ``role``; a loaded one is first checked against ``schema`` (once), ``ValueError`` naming estimator, role and key."""
        if schema is not None and (name, role) in self._unchecked:
            from .schema import check_state_schema

            check_state_schema(self._states[name][role], schema, f"the state {self._source}: estimator {name!r}, role {role!r}")
            self._unchecked.discard((name, role))
        return StateView(self._states.get(name, {}).get(role, {}))

    def check_options(self, name: str, options: Mapping[str, Any]) -> None:
        """``ValueError`` when estimator ``name`` runs with options other than those its state was made with (unless accepted)."""
        recorded = self._options.get(name)
        if recorded is not None and name in self._states:
            compare_options(name, recorded, options, self._accepted, self._source)

    def loaded_code(self, name: str) -> tuple[Mapping[str, Any], str] | None:
        """Once per load: the code that made the loaded states of ``name`` (as recorded) and where they were loaded from;
        None when there is no such record or it was read already."""
        if name not in self._code_unread:
            return None
        self._code_unread.discard(name)
        return self._code[name], self._source

    def commit(
        self,
        updates: Mapping[tuple[str, str], Mapping[str, Any]],
        options: Mapping[str, Mapping[str, Any]] | None = None,
        code: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        """Store the new states (``(name, role) -> state``), the options each estimator ran with and the code that ran (``code``)."""
        claimed: set[int] = set()
        for (name, role), state in updates.items():
            checked = absorb(state, f"estimator {name!r} for role {role!r}", "the new state", top=True)
            self._states.setdefault(name, {})[role] = materialise(checked, claimed)
            self._unchecked.discard((name, role))
        for name, values in (options or {}).items():
            if name in self._states:
                self._options[name] = dict(values)
        for name, record in (code or {}).items():
            if name in self._states:
                self._code[name] = check_state(record, "commit", f"code[{name!r}]")
                self._code_unread.discard(name)

    def preview(self) -> EstimatorState:
        """An owner for calls whose new states are dropped (evaluation): it reads this state and commits nothing."""
        out = _Preview()
        out._states, out._options, out._accepted, out._source, out._unchecked = self._states, self._options, self._accepted, self._source, self._unchecked
        out._code, out._code_unread = self._code, self._code_unread
        return out

    def __bool__(self) -> bool:
        return bool(self._states)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EstimatorState) and self._states == other._states and self._options == other._options

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"EstimatorState({self._states!r}, options={self._options!r})"

    def clear(self) -> None:
        self._states, self._options, self._accepted, self._source, self._unchecked = {}, {}, frozenset(), "held", set()
        self._code, self._code_unread = {}, set()

    def state_dict(self) -> dict[str, Any]:
        """``{"format": 2, "estimators": {name: {role: state}}, "options": {name: {option: value}}, "provenance": {name: code}}``,
        a deep copy (JSON-serialisable)."""
        return {
            "format": STATE_FORMAT,
            "estimators": copy.deepcopy(self._states),
            "options": copy.deepcopy(self._options),
            "provenance": copy.deepcopy(self._code),
        }

    def load_state_dict(
        self,
        state_dict: Mapping[str, Any],
        *,
        options: Mapping[str, Mapping[str, Any]] | None = None,
        schemas: Mapping[str, Mapping[str, Any] | None] | None = None,
        accept_changed_options: Collection[str] = (),
        source: str = "loaded",
    ) -> None:
        """Replace every state held by those of ``state_dict`` (from :meth:`state_dict`, or its JSON).

        ``ValueError`` if malformed: not plain data, or a state that breaks its estimator's schema
        (``schemas``: name -> ``state_schema``; naming estimator, role and key; an estimator not in
        ``schemas`` is checked at its first :meth:`get` with a schema). ``options`` (name -> the
        options the run uses now) are compared at once; otherwise at the next :meth:`check_options`.
        A differing option is refused unless named in ``accept_changed_options`` (``"*"``: any);
        ``source`` (a path, say) goes into the messages.
        """
        if not isinstance(state_dict, Mapping) or state_dict.get("format") not in READABLE_FORMATS or not isinstance(state_dict.get("estimators"), Mapping):
            got = sorted(state_dict) if isinstance(state_dict, Mapping) else type(state_dict).__name__
            raise ValueError(
                f"load_state_dict: expected {{'format': {STATE_FORMAT}, 'estimators': {{name: {{role: state}}}}, 'options': {{name: {{option: value}}}}}} "
                f"(from state_dict()), got {got}"
            )
        from .schema import check_state_schema

        states: dict[str, dict[str, dict[str, Any]]] = {}
        unchecked: set[tuple[str, str]] = set()
        for name, roles in state_dict["estimators"].items():
            if not isinstance(name, str) or not isinstance(roles, Mapping):
                raise ValueError(f"load_state_dict: estimators[{name!r}] must map role names to states, got {type(roles).__name__}")
            states[name] = {}
            for role, state in roles.items():
                if not isinstance(role, str):
                    raise ValueError(f"load_state_dict: estimators[{name!r}] has a non-str role {role!r}")
                states[name][role] = check_state(state, "load_state_dict", f"estimators[{name!r}][{role!r}]")
                schema = (schemas or {}).get(name)
                if schema is not None:
                    check_state_schema(states[name][role], schema, f"load_state_dict ({source}): estimator {name!r}, role {role!r}")
                elif schemas is None or name not in schemas:
                    unchecked.add((name, role))
        recorded = state_dict.get("options", {})
        if not isinstance(recorded, Mapping) or not all(isinstance(v, Mapping) for v in recorded.values()):
            raise ValueError(f"load_state_dict: 'options' must map estimator names to their options, got {recorded!r}")
        accepted = frozenset(accept_changed_options)
        kept = {name: check_state(values, "load_state_dict", f"options[{name!r}]") for name, values in recorded.items()}
        made_by = state_dict.get("provenance", {})  # absent in files written before it was recorded
        if not isinstance(made_by, Mapping) or not all(isinstance(v, Mapping) for v in made_by.values()):
            raise ValueError(f"load_state_dict: 'provenance' must map estimator names to the code that made their states, got {made_by!r}")
        code = {name: check_state(values, "load_state_dict", f"provenance[{name!r}]") for name, values in made_by.items() if name in states}
        for name, current in (options or {}).items():
            if name in kept and name in states:
                compare_options(name, kept[name], current, accepted, source)
        self._states, self._options, self._accepted, self._source, self._unchecked = states, kept, accepted, source, unchecked
        self._code, self._code_unread = code, set(code)

    def to_json(self) -> str:
        import json  # only here and in from_json: not paid by `import rllm_plugins`

        return json.dumps({"format": STATE_FORMAT, "estimators": self._states, "options": self._options, "provenance": self._code})

    @classmethod
    def from_json(cls, text: str) -> EstimatorState:
        import json

        out = cls()
        out.load_state_dict(json.loads(text))
        return out


class _Preview(EstimatorState):
    """:meth:`EstimatorState.preview`: shares the kept states; commits are dropped."""

    def commit(
        self,
        updates: Mapping[tuple[str, str], Mapping[str, Any]],
        options: Mapping[str, Mapping[str, Any]] | None = None,
        code: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        for (name, role), state in updates.items():  # checked as a commit would, kept nowhere
            absorb(state, f"estimator {name!r} for role {role!r}", "the new state", top=True)


def accepted_from_env() -> frozenset[str]:
    """The option names :data:`ACCEPT_ENV` accepts changes of (``"*"``: every option)."""
    return frozenset(name.strip() for name in os.environ.get(ACCEPT_ENV, "").split(",") if name.strip())
