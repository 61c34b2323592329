"""Hook specifications of the ``rllm_plugins`` project (pluggy).

A plugin is any object (usually a module) with ``@hookimpl``-marked functions named after
these specs; publish it under the entry-point group ``rllm_plugins``.
"""

from __future__ import annotations

from collections.abc import Iterable

import pluggy

from ..spec import AdvEstimatorSpec

PROJECT = "rllm_plugins"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def rllm_adv_estimators() -> Iterable[AdvEstimatorSpec]:  # type: ignore[empty-body]
    """Return (or yield) the advantage estimators this plugin contributes.

    :return: :class:`~rllm_plugins.AdvEstimatorSpec` objects; each ``name`` (and alias)
        becomes selectable everywhere: ``AlgorithmConfig.estimator``, verl's
        ``algorithm.adv_estimator=rllm_<name>``, TRL's ``adv_estimator=<name>``.
    """
