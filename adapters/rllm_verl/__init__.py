"""verl adapter of rllm-plugins: the ``rllm_*`` advantage estimators in verl's registry, DataProto <-> groups.

The names below are imported on first use, so that ``import rllm_verl.check`` (``rllm-plugins
verl-check --help``) imports neither verl nor torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from rllm_plugins.extras import require_extra

require_extra("rllm_verl", "verl", ["verl", "torch"])

_EXPORTS = {
    "verl_algorithm_config": "algorithm",
    "ESTIMATOR_KWARGS_KEY": "bridge",
    "compute_rllm_advantage": "bridge",
    "verl_estimator": "bridge",
    "ROW_ID_KEY": "dataproto",
    "apply_advantages": "dataproto",
    "dataproto_to_groups": "dataproto",
    "VERL_PREFIX": "registration",
    "register_estimators_into_verl": "registration",
    "rllm_names_in_verl": "registration",
    "verl_name": "registration",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
