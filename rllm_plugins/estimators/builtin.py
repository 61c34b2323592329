"""The built-in estimators, registered as the first plugin."""

from __future__ import annotations

from collections.abc import Iterable

from ..discovery.hookspecs import hookimpl
from ..spec import AdvEstimatorSpec
from . import BUILTIN_SPECS


@hookimpl
def rllm_adv_estimators() -> Iterable[AdvEstimatorSpec]:
    return BUILTIN_SPECS
