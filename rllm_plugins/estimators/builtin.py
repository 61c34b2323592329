"""The built-in estimators, registered as the first plugin: :data:`~rllm_plugins.estimators.BUILTIN_SPECS`, the ``SPECS``
of every module in :data:`~rllm_plugins.estimators.BUILTIN_MODULES`, each declared beside its estimator's code."""

from __future__ import annotations

from collections.abc import Iterable

from ..discovery.hookspecs import hookimpl
from ..spec import AdvEstimatorSpec
from . import BUILTIN_SPECS


@hookimpl
def rllm_adv_estimators() -> Iterable[AdvEstimatorSpec]:
    return BUILTIN_SPECS
