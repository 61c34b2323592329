"""Which code computed a run's advantages: the estimator of each role and the transforms, with their options, where each
comes from (built-in, a plugin's distribution and version, or user code) and the rllm-plugins version.

:func:`provenance` builds the record (plain JSON data); :func:`provenance_line` its one-line text form, stable (the same
record gives the same line: roles, options and keys sorted) and short enough for a log line::

    rloo [built-in]; options {"norm_adv_by_std_in_grpo":true}; transforms clip{"max":2.0} [built-in]; rllm-plugins 0.1.0

Every path builds it with these two functions: the collector (``metrics.provenance``), verl's ``rllm_*`` estimators
(the log line), TRL's trainer (its logs), ``verl-check`` and ``verl-rehearse``. A stateful estimator's state file
records :func:`code_of` its estimator (:mod:`.state.store`); :func:`changed_code` words a resume under other code.

A leaf: it reads the resolved objects by their attributes (``Estimator.spec.name`` and ``.provider``, a selected
transform's ``name``, ``options`` and ``transform.provider``) and imports nothing of the core.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ALL_ROLES", "changed_code", "code_of", "package_version", "provenance", "provenance_line"]

ALL_ROLES = "*"  # the role key of an estimator that serves every role not named beside it (TRL's adv_estimator)


@functools.cache
def package_version() -> str:
    """The installed rllm-plugins distribution's version (``"unknown"`` when it is not installed as a distribution)."""
    from importlib import metadata

    try:
        return metadata.version("rllm-plugins")
    except metadata.PackageNotFoundError:
        return "unknown"


def _plain(value: Any) -> Any:
    """``value`` as JSON data: numpy scalars as numbers, mappings with str keys, sequences as lists, anything else its ``repr``."""
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else repr(value)
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # a numpy scalar (numpy is not imported here)
        return _plain(value.item())
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda item: str(item[0]))}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return repr(value)


def code_of(provider: Any) -> dict[str, Any]:
    """Where an estimator's or a transform's code comes from (``Provider``): ``source`` ``"built-in"``, ``"plugin"`` or
    ``"user"``; ``plugin`` (the entry point's name, or ``module.function`` of user code); ``distribution`` and ``version``
    (built-ins: rllm-plugins'; user code: None)."""
    kind = getattr(provider, "kind", "user")
    source = {"builtin": "built-in", "plugin": "plugin"}.get(kind, "user")
    if source == "built-in":
        return {"source": source, "plugin": "builtin", "distribution": "rllm-plugins", "version": getattr(provider, "version", None) or package_version()}
    distribution, version = getattr(provider, "distribution", None), getattr(provider, "version", None)
    return {"source": source, "plugin": getattr(provider, "plugin", None), "distribution": distribution, "version": version}


def provenance(
    estimators_by_role: Mapping[str, Any], transforms: Sequence[Any] = (), options: Mapping[str, Any] | None = None, shapers: Sequence[Any] = ()
) -> dict[str, Any]:
    """What computes advantages: ``estimators_by_role`` (role -> resolved ``Estimator``; :data:`ALL_ROLES` for one serving
    every other role), the selected ``transforms`` in order, the estimators' ``options``, and the reward ``shapers``
    (the key only where there are some). Plain JSON data::

        {"estimators": {role: {"name", "source", "plugin", "distribution", "version"}},
         "options": {...}, "transforms": [{"name", "options", "source", ...}], "rllm_plugins": "0.1.0"}
    """
    record = {
        "estimators": {str(role): {"name": estimator.spec.name, **code_of(estimator.provider)} for role, estimator in sorted(estimators_by_role.items())},
        "options": _plain(dict(options or {})),
        "transforms": [{"name": t.name, "options": _plain(dict(getattr(t, "options", None) or {})), **code_of(t.transform.provider)} for t in transforms],
        "rllm_plugins": package_version(),
    }
    if shapers:
        record["shapers"] = [{"name": s.name, "options": _plain(dict(s.options)), **code_of(s.shaper.provider)} for s in shapers]
    return record


def _where(code: Mapping[str, Any]) -> str:
    if code.get("source") == "built-in":
        return "[built-in]"
    if code.get("source") == "plugin":
        return f"[{code.get('distribution') or 'unknown distribution'} {code.get('version') or 'unknown version'}]"
    return f"[user code {code.get('plugin')}]"


def _json(value: Any) -> str:
    import json  # here: `import rllm_plugins` does not pay for it

    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def provenance_line(record: Mapping[str, Any]) -> str:
    """The one-line text form of a :func:`provenance` record: the estimators (one without its role; several as ``role: ...``,
    ``*`` every other role), each with where it comes from, then ``options``, ``transforms`` and the rllm-plugins version."""
    estimators = record.get("estimators", {})
    shown = [f"{entry['name']} {_where(entry)}" for entry in estimators.values()]
    if len(estimators) > 1:
        shown = [f"{role}: {text}" for role, text in zip(estimators, shown, strict=True)]
    options = record.get("options") or {}
    transforms, shapers = (
        [f"{t['name']}{_json(t['options']) if t.get('options') else ''} {_where(t)}" for t in record.get(key, [])] for key in ("transforms", "shapers")
    )
    head = ", ".join(shown) or "no estimator"
    shaped = f"; shapers {', '.join(shapers)}" if shapers else ""
    return f"{head}; options {_json(options)}{shaped}; transforms {', '.join(transforms) or 'none'}; rllm-plugins {record.get('rllm_plugins')}"


def changed_code(name: str, recorded: Mapping[str, Any], current: Mapping[str, Any], source: str) -> str | None:
    """The warning for estimator ``name`` whose state (``source``, a path) was made by other code than runs now: another
    source, distribution or version (:func:`code_of` both, with ``rllm_plugins``, the version named too); None when the same."""
    keys = ("source", "plugin", "distribution", "version")
    if all(recorded.get(key) == current.get(key) for key in keys):
        return None

    def said(code: Mapping[str, Any]) -> str:
        if code.get("source") == "built-in":
            return f"the built-in of rllm-plugins {code.get('version') or 'unknown version'}"
        if code.get("source") == "user":
            text = f"user code {code.get('plugin')}"
        else:
            text = f"plugin {code.get('plugin')!r} of {code.get('distribution') or 'unknown distribution'} {code.get('version') or 'unknown version'}"
        return f"{text} (rllm-plugins {code.get('rllm_plugins') or 'unknown'})"

    return (
        f"estimator {name!r}: the state {source} was made by {said(recorded)}, and {said(current)} runs now; "
        "its running baselines carry on under the new code. If that code keeps its state otherwise, start from a fresh state (no state file)"
    )
