"""verl adapter of rllm-plugins: the ``rllm_*`` advantage estimators in verl's registry, DataProto <-> groups.

The names below are imported on first use, so that ``import rllm_verl.tools.check`` (``rllm-plugins
verl-check --help``) imports neither verl nor torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from rllm_plugins.extras import require_extra
from rllm_plugins.moved import keep_old_paths

require_extra("rllm_verl", "verl", ["verl", "torch"])

# import paths of the modules before they were grouped by role (docs/architecture.md)
OLD_PATHS = {
    "verl_plugin": "plugin",
    "bridge": "compute.outcome",
    "step_bridge": "compute.steps",
    "sessions": "compute.sessions",
    "multi_trajectories": "patches.sessions",
    "rollout_order": "compute.order",
    "multi_objective": "compute.multi_objective",
    "stateful_call": "compute.stateful",
    "estimator_state": "compute.state",
    "reward_keys": "patches.legacy",
    "v1_batch": "patches.v1",
    "dataproto": "groups",
    "algorithm": "algorithm_config",
    "check": "tools.check",
    "agent_loop_check": "tools.agent_loop",
    "rehearse": "tools.rehearse",
    "conformance_v1": "conformance.v1",
}
keep_old_paths(__name__, OLD_PATHS)

_EXPORTS = {
    "verl_algorithm_config": "algorithm_config",
    "ESTIMATOR_KWARGS_KEY": "compute.outcome",
    "compute_rllm_advantage": "compute.outcome",
    "verl_estimator": "compute.outcome",
    "ROW_ID_KEY": "groups",
    "apply_advantages": "groups",
    "dataproto_to_groups": "groups",
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
