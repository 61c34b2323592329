"""The built-in estimators, registered as the first plugin."""

from __future__ import annotations

from collections.abc import Iterable

from ..estimators import BUILTIN_SPECS
from ..spec import AdvEstimatorSpec
from .hookspecs import hookimpl


@hookimpl
def rllm_adv_estimators() -> Iterable[AdvEstimatorSpec]:
    return BUILTIN_SPECS
