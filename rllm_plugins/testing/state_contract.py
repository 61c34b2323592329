"""The contract of an estimator with memory (``AdvEstimatorSpec(stateful=True)``), on top of the outcome rules.

The outcome rules (:mod:`.rules`) are judged with the state held fixed (:func:`bind_state`: a warm state
from one call on a small batch, handed to every call); the rules here judge the state itself. Each
returns ``None`` (it holds) or a message; :func:`check_state_rules` runs them all.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..calling import call_with_accepted_kwargs
from ..segments import offsets_from_sizes
from ..state.store import EstimatorState, call_stateful, check_state
from .calls import Case, Subject, short

__all__ = ["STATE_RULES", "bind_state", "check_state_rules", "warm_state"]

TOL = 1e-9
WARM_UP = Case(((1.0, 0.0, 1.0), (0.5,)), ((3, 4, 5), (2,)))

STATE_RULES: dict[str, str] = {
    "state_plain": "the new state is plain data (str keys; str, numbers, bool, None, lists, dicts) that survives a JSON round trip",
    "state_deterministic": "the same state and the same batch give the same advantages and the same new state",
    "state_resumes": "a state restored from its JSON continues exactly as the live one",
    "state_input_untouched": "the state passed in is left unchanged, by a call that succeeds and by one that raises",
    "state_forms_agree": "the list and batched forms give the same new state",
    "state_as_owners_give_it": "given the state as owners give it (nested mappings read-only, no copy) the call gives the same advantages and new state",
}


def _batched(subject: Subject, case: Case, state: Any) -> tuple[np.ndarray, Any]:
    """The raw batched form on ``case`` with ``state`` (not copied): ``(advantages, new_state)``; raises ``ValueError`` if not a pair."""
    values = np.array([r for g in case.rewards for r in g], dtype=np.float64)
    lengths = np.array([n for g in case.lengths for n in g], dtype=np.float64)
    out = subject.batched_form(values, offsets_from_sizes(case.sizes), state=state, lengths=lengths, norm_adv_by_std_in_grpo=True)
    if not isinstance(out, tuple) or len(out) != 2:
        raise ValueError(f"the batched form returned {type(out).__name__} {short(out)}, not (advantages, new_state)")
    return np.asarray(out[0], dtype=np.float64), out[1]


def warm_state(subject: Subject) -> Any:
    """The state after one call from ``{}`` on a small batch (``{}`` if that call fails: the other rules report why)."""
    try:
        return _batched(subject, WARM_UP, {})[1]
    except Exception:
        return {}


def bind_state(subject: Subject, state: Any) -> Subject:
    """``subject`` as a stateless estimator: every call gets a copy of ``state`` and the new state is dropped."""

    def list_form(rewards: Sequence[Any], **kwargs: Any) -> Any:
        out = call_with_accepted_kwargs(subject.list_form, rewards=rewards, state=copy.deepcopy(state), **kwargs)
        return out[0] if isinstance(out, tuple) and len(out) == 2 else out

    def batched_form(values: np.ndarray, offsets: np.ndarray, /, **kwargs: Any) -> Any:
        out = subject.batched_form(values, offsets, state=copy.deepcopy(state), **kwargs)
        return out[0] if isinstance(out, tuple) and len(out) == 2 else out

    return replace(subject, list_form=list_form, batched_form=batched_form, stateful=False)


def _close(a: Any, b: Any) -> bool:
    """Equal plain data, floats to ``TOL`` relative."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=TOL, abs_tol=TOL)
    return bool(a == b)


def _plain(subject: Subject, case: Case, state: Any) -> str | None:
    _, new = _batched(subject, case, copy.deepcopy(state))
    try:
        checked = check_state(new, "the estimator", "the new state")
    except ValueError as e:
        return str(e)
    return None if json.loads(json.dumps(checked)) == checked else f"the new state {short(new)} changes through JSON"


def _deterministic(subject: Subject, case: Case, state: Any) -> str | None:
    a, s1 = _batched(subject, case, copy.deepcopy(state))
    b, s2 = _batched(subject, case, copy.deepcopy(state))
    if not np.allclose(a, b, rtol=TOL, atol=TOL, equal_nan=True):
        return f"two calls with the same state gave advantages {short(a.tolist())} and {short(b.tolist())}"
    return None if _close(s1, s2) else f"two calls with the same state gave new states {short(s1)} and {short(s2)}"


def _resumes(subject: Subject, case: Case, state: Any) -> str | None:
    _, middle = _batched(subject, case, copy.deepcopy(state))
    live_adv, live_state = _batched(subject, case, copy.deepcopy(middle))
    restored = json.loads(json.dumps(check_state(middle, "the estimator", "the new state")))
    adv, new = _batched(subject, case, restored)
    if not np.allclose(live_adv, adv, rtol=TOL, atol=TOL, equal_nan=True):
        return f"after a JSON round trip of the state the advantages are {short(adv.tolist())}, live {short(live_adv.tolist())}"
    return None if _close(live_state, new) else f"after a JSON round trip the new state is {short(new)}, live {short(live_state)}"


def _input_untouched(subject: Subject, case: Case, state: Any) -> str | None:
    given = copy.deepcopy(state)
    _batched(subject, case, given)
    if not _close(given, state):
        return f"a call changed the state it was given from {short(state)} to {short(given)}"
    values = np.array([r for g in case.rewards for r in g], dtype=np.float64)
    bad = np.array([0, values.size + 1], dtype=np.int64)  # offsets past the rewards: a call that should raise
    given = copy.deepcopy(state)
    with contextlib.suppress(Exception):
        subject.batched_form(values, bad, state=given)
    return None if _close(given, state) else f"a failing call changed the state it was given from {short(state)} to {short(given)}"


def _forms_agree(subject: Subject, case: Case, state: Any) -> str | None:
    _, from_batched = _batched(subject, case, copy.deepcopy(state))
    rewards = [np.array(g, dtype=np.float64) for g in case.rewards]
    out = call_with_accepted_kwargs(subject.list_form, rewards=rewards, state=copy.deepcopy(state), norm_adv_by_std_in_grpo=True)
    if not isinstance(out, tuple) or len(out) != 2:
        return f"the list form returned {type(out).__name__} {short(out)}, not ((advantages_by_group, returns_by_group), new_state)"
    return None if _close(out[1], from_batched) else f"new state {short(out[1])} from the list form, {short(from_batched)} from the batched form"


def _as_owners_give_it(subject: Subject, case: Case, state: Any) -> str | None:
    plain_adv, plain_new = _batched(subject, case, copy.deepcopy(state))
    store = EstimatorState()
    store.commit({("subject", "role"): check_state(state, "the estimator", "the state")})
    values = np.array([r for g in case.rewards for r in g], dtype=np.float64)
    lengths = np.array([n for g in case.lengths for n in g], dtype=np.float64)
    try:
        current = store.get("subject", "role")
        offsets = offsets_from_sizes(case.sizes)
        adv, new = call_stateful(subject.batched_form, current, "the estimator", values, offsets, lengths=lengths, norm_adv_by_std_in_grpo=True)
    except ValueError as e:
        return str(e)
    store.commit({("subject", "role"): new})
    kept = store.state_dict()["estimators"]["subject"]["role"]
    if not np.allclose(np.asarray(adv, dtype=np.float64), plain_adv, rtol=TOL, atol=TOL, equal_nan=True):
        return f"given read-only views the advantages are {short(np.asarray(adv).tolist())}, given a copy {short(plain_adv.tolist())}"
    return None if _close(kept, plain_new) else f"given read-only views the new state is {short(kept)}, given a copy {short(plain_new)}"


_CHECKS: dict[str, Callable[[Subject, Case, Any], str | None]] = {
    "state_plain": _plain,
    "state_deterministic": _deterministic,
    "state_resumes": _resumes,
    "state_input_untouched": _input_untouched,
    "state_forms_agree": _forms_agree,
    "state_as_owners_give_it": _as_owners_give_it,
}


def check_state_rules(subject: Subject, cases: Sequence[Case], state: Any) -> tuple[dict[str, str], list[tuple[str, str, Case]]]:
    """Judge every state rule on the non-empty ``cases`` from ``state``: ``(verdicts, [(rule, message, case)])``."""
    verdicts: dict[str, str] = {}
    found: list[tuple[str, str, Case]] = []
    for name, check in _CHECKS.items():
        verdicts[name] = "pass"
        for case in (c for c in cases if c.rewards):
            try:
                message = check(subject, case, state)
            except Exception as e:
                message = f"raised {type(e).__name__}: {e}"
            if message:
                verdicts[name] = "FAIL"
                found.append((name, message, case))
                break
    return verdicts, found
