"""rLLM-native advantage estimators for TRL's ``GRPOTrainer``.

Swap ``GRPOConfig``/``GRPOTrainer`` for :class:`RLLMGRPOConfig`/:class:`RLLMGRPOTrainer` and set
``adv_estimator`` to any registered estimator name (``trl_grpo`` follows TRL's ``scale_rewards``).

The names below are loaded from their module when first read, so that ``import rllm_trl.config`` loads the
config alone (no compute module).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rllm_plugins.extras import require_extra
from rllm_plugins.moved import keep_old_paths

require_extra("rllm_trl", "trl", ["trl", "torch"])

# import paths of modules that were renamed or folded into another (docs/architecture.md)
OLD_PATHS = {
    "advantages": "outcome",
    "turn_advantages": "turns",
    "trajectories": "outcome",
    "groups": "outcome",
    "estimator_state": "trainer",
    "state": "trainer",
    "mixin": "trainer",
    "rollout_checks": "rollouts",
    "rollout_keys": "rollouts",
    "mask_direction": "rollouts",
    "turn_sources": "turns",
}
keep_old_paths(__name__, OLD_PATHS)

EXPORTS = {
    "AdvantageSettings": "config",
    "RLLMGRPOConfig": "config",
    "advantage_settings": "config",
    "RLLMAdvantageMixin": "trainer",
    "RLLMGRPOTrainer": "trainer",
    "check_trainer_setup": "trainer",
    "RewardBatch": "outcome",
    "advantages_from_trajectory_groups": "outcome",
    "combine_rewards": "outcome",
    "compute_advantages": "outcome",
    "compute_advantages_via_groups": "outcome",
    "compute_metrics": "outcome",
    "prepare_batch": "outcome",
    "to_trajectory_groups": "outcome",
    "check_trl_compatibility": "versions",
}

__all__ = [
    "AdvantageSettings",
    "RLLMAdvantageMixin",
    "RLLMGRPOConfig",
    "RLLMGRPOTrainer",
    "RewardBatch",
    "advantage_settings",
    "advantages_from_trajectory_groups",
    "check_trainer_setup",
    "check_trl_compatibility",
    "combine_rewards",
    "compute_advantages",
    "compute_advantages_via_groups",
    "compute_metrics",
    "prepare_batch",
    "to_trajectory_groups",
]

if TYPE_CHECKING:
    from rllm_trl.config import AdvantageSettings, RLLMGRPOConfig, advantage_settings
    from rllm_trl.outcome import (
        RewardBatch,
        advantages_from_trajectory_groups,
        combine_rewards,
        compute_advantages,
        compute_advantages_via_groups,
        compute_metrics,
        prepare_batch,
        to_trajectory_groups,
    )
    from rllm_trl.trainer import RLLMAdvantageMixin, RLLMGRPOTrainer, check_trainer_setup
    from rllm_trl.versions import check_trl_compatibility


def __getattr__(name: str) -> Any:
    module = EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *EXPORTS})
