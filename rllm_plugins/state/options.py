"""The options a stateful estimator's state was made with: recorded in the state file, compared on resume.

A running baseline made with ``decay=0.95`` means something else under ``decay=0.5``, and a state
keyed by task means nothing under ``key_by="role"``. So the owner records each stateful estimator's
options (its declared options, defaults filled in, plus those given) with its state, and a resume
whose options differ is refused, naming the option and both values, unless that option's change is
accepted deliberately (``accept_changed_options``; in TRL and verl the environment variable
:data:`~.state.ACCEPT_ENV`, a comma-separated list of option names or ``*``).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..options import spec_options
from ..registry import get_estimator
from ..spec import AdvEstimatorSpec
from .store import ACCEPT_ENV
from .views import absorb

__all__ = ["accepted_from_env", "state_options", "state_schemas"]


def state_options(spec: AdvEstimatorSpec, given: Mapping[str, Any]) -> dict[str, Any]:
    """The options a call of ``spec`` runs with: each declared option's value (``given``, else its default), plain data.

    An open estimator (``**kwargs`` and no declared options) records every key of ``given``.
    """
    options = spec_options(spec)
    out = {key: given.get(key, default) for key, default in options.defaults.items() if key in given or default is not inspect.Parameter.empty}
    if options.open:
        out.update(given)
    return {key: _recordable(value) for key, value in sorted(out.items())}


def _recordable(value: Any) -> Any:
    try:
        return absorb(value, "", "")
    except ValueError:
        return repr(value)


def accepted_from_env() -> frozenset[str]:
    """The option names :data:`~.state.ACCEPT_ENV` accepts changes of (``"*"``: every option)."""
    return frozenset(name.strip() for name in os.environ.get(ACCEPT_ENV, "").split(",") if name.strip())


def state_schemas(names: Iterable[str]) -> dict[str, Mapping[str, Any] | None]:
    """``state_schema`` of each installed estimator of ``names`` (an unknown name is left out: checked at its first call)."""
    out = {}
    for name in names:
        try:
            out[name] = get_estimator(name).spec.state_schema
        except ValueError:
            continue
    return out
