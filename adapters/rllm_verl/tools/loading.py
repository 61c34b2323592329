"""Whether verl's processes load rllm-plugins, and whether ``import verl`` works at all with the user's environment.

verl registers the ``rllm_*`` estimators (and applies the transforms) only in a process that loads rllm-plugins: through
the ``verl.plugins`` entry point :data:`ENTRY_POINT_NAME` (verl >= 0.9, as ``VERL_USE_EXTERNAL_PLUGINS`` allows) or the
module list ``VERL_USE_EXTERNAL_MODULES`` (every verl). :func:`entry_point_policy_error` says why it would not, and the fix;
:func:`external_modules_error` why the module list itself makes ``import verl`` fail. Both read the environment only, so
``verl-check`` and ``verl-rehearse`` can say so before anything of verl is imported.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
from collections.abc import Mapping, Sequence

from rllm_verl.versions import PLUGIN_MODULE

__all__ = ["ENTRY_POINT_NAME", "SHELL", "UNKNOWN_ESTIMATOR", "entry_point_policy_error", "external_modules_error", "installed_entry_points"]

ENTRY_POINT_NAME = "rllm_plugins"  # our entry point in verl's ``verl.plugins`` group (not the distribution name)
SHELL = "in the shell that starts the driver (and ray start, on a cluster you start yourself)"


def installed_entry_points() -> list[tuple[str, str]]:
    from importlib.metadata import entry_points

    return [(ep.name, ep.value) for ep in entry_points(group="verl.plugins")]


def external_modules_error(environ: Mapping[str, str] | None = None) -> str | None:
    """Why ``import verl`` fails on ``VERL_USE_EXTERNAL_MODULES``, and the line that fixes it (``"... Fix: ..."``); None when every
    name it lists is a module here.

    verl imports each comma-separated name as is (unstripped) in ``import verl``: a space around a name, an empty name (a comma
    too many) or a name that is no module makes ``import verl`` fail in every process (the driver and Ray's workers). Checked
    without importing anything; a name close to ``rllm_verl.plugin`` is taken for it in the fix, and the fix keeps
    ``rllm_verl.plugin`` in the line where this verl has no entry points (:func:`entry_point_policy_error`).
    """
    from rllm_verl.versions import EXTERNAL_MODULES_ENV, verl_features

    environ = os.environ if environ is None else environ
    raw = environ.get(EXTERNAL_MODULES_ENV, "")
    if not raw:
        return None
    problems, fixed = [], []
    for name in raw.split(","):
        stripped = name.strip()
        if not stripped:
            problems.append("the list holds an empty name (a comma too many)")
            continue
        if stripped != name:
            problems.append(f"{name!r} has spaces around it")
        if not _is_module(stripped):
            close = difflib.get_close_matches(stripped, [PLUGIN_MODULE], n=1, cutoff=0.8)
            problems.append(f"{stripped!r} is no module here" + (f" (did you mean {close[0]!r}?)" if close else ""))
            if not close:
                continue
            stripped = close[0]
        fixed.append(stripped)
    if not problems:
        return None
    line = ",".join(dict.fromkeys(fixed))
    what = f"verl {verl_features().version} imports each comma-separated name of {EXTERNAL_MODULES_ENV}={raw!r} as is, and {'; '.join(problems)}"
    policy = entry_point_policy_error({EXTERNAL_MODULES_ENV: line})
    if policy is not None and " Fix: " in policy:  # the corrected line still does not load rllm-plugins
        return f"{what}. Fix: {policy.split(' Fix: ', 1)[1]}"
    if not line:
        return f"{what}. Fix: unset {EXTERNAL_MODULES_ENV}"
    return f"{what}. Fix: export {EXTERNAL_MODULES_ENV}={line} {SHELL}"


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package that is not installed, a malformed name
        return False


UNKNOWN_ESTIMATOR = "verl will not load the rllm_* estimators and the run fails with 'Unknown advantage estimator'"
"""What a run does without rllm-plugins loaded, for an ``rllm_*`` estimator (the default ``consequence`` of the policy error)."""


def entry_point_policy_error(
    environ: Mapping[str, str] | None = None,
    installed: Sequence[tuple[str, str]] | None = None,
    entry_points: bool | None = None,
    consequence: str = UNKNOWN_ESTIMATOR,
) -> str | None:
    """Why verl would not register the ``rllm_*`` names in a process that imports it (None when it will).

    ``VERL_USE_EXTERNAL_MODULES`` naming ``rllm_verl.plugin`` registers ours on every verl (verl imports
    each comma-separated name as is, unstripped, in ``import verl``). verl >= 0.9 (``entry_points``, default:
    the installed verl's, :mod:`rllm_verl.versions`) also reads ``VERL_USE_EXTERNAL_PLUGINS`` once, in
    ``import verl``: ``auto`` (the default) loads every ``verl.plugins`` entry point, ``none`` none, and a
    comma-separated list only the entry points it names; the entry point must then be installed:
    ``installed`` lists the ``(name, value)`` of the ``verl.plugins`` entry points (default: those of the
    installed distributions). verl 0.7 and 0.8 load no entry point: there the variable is the only way. ``consequence`` says
    what the run does then (default: :data:`UNKNOWN_ESTIMATOR`).
    """
    from rllm_verl.versions import EXTERNAL_MODULES_ENV, verl_features

    environ = os.environ if environ is None else environ
    raw_modules = environ.get(EXTERNAL_MODULES_ENV, "")
    modules = set(raw_modules.split(","))  # verl imports each name as is, unstripped
    if PLUGIN_MODULE in modules:
        return None
    if entry_points is None:
        entry_points = verl_features().entry_points
    if not entry_points:
        line = f"{EXTERNAL_MODULES_ENV}={','.join([raw_modules, PLUGIN_MODULE]) if raw_modules.strip() else PLUGIN_MODULE}"
        return (
            f"verl {verl_features().version} has no verl.plugins entry points (they came with verl 0.9.0): import verl loads rllm-plugins "
            f"only when {EXTERNAL_MODULES_ENV} names {PLUGIN_MODULE}, so {consequence} (in verl's TaskRunner). "
            f"Fix: export {line} {SHELL}"
        )
    raw = environ.get("VERL_USE_EXTERNAL_PLUGINS", "auto")
    policy = raw.strip().lower()
    allowed = [name.strip() for name in policy.split(",") if name.strip()] if policy != "none" else []
    if policy == "auto" or ENTRY_POINT_NAME in allowed:
        installed = installed_entry_points() if installed is None else installed
        if (ENTRY_POINT_NAME, PLUGIN_MODULE) in set(installed):
            return None
        return (
            f"no entry point {ENTRY_POINT_NAME!r} = {PLUGIN_MODULE!r} of the verl.plugins group is installed (rllm_verl is "
            f"importable without its distribution's metadata, e.g. from a source tree on PYTHONPATH), so {consequence}. Fix: install rllm-plugins[verl] "
            f"(pip install -e . in a checkout), or set {EXTERNAL_MODULES_ENV}={PLUGIN_MODULE}"
        )
    if policy == "none":
        reason, fix = "VERL_USE_EXTERNAL_PLUGINS=none turns verl's plugin discovery off", f"unset it, or set VERL_USE_EXTERNAL_PLUGINS={ENTRY_POINT_NAME}"
    else:
        reason = f"VERL_USE_EXTERNAL_PLUGINS={raw!r} lets verl load only the entry points {', '.join(map(repr, allowed)) or '(none)'}"
        fix = f"add ours: VERL_USE_EXTERNAL_PLUGINS={','.join([*allowed, ENTRY_POINT_NAME])} (or unset it)"
    return (
        f"{reason}, so {consequence}. Fix: {fix}. The entry-point name is {ENTRY_POINT_NAME!r} (group verl.plugins), not the distribution name 'rllm-plugins'."
    )
