"""rLLM-native advantage estimators for TRL's ``GRPOTrainer``.

Swap ``GRPOConfig``/``GRPOTrainer`` for :class:`RLLMGRPOConfig`/:class:`RLLMGRPOTrainer` and set
``adv_estimator`` to any registered estimator name (``trl_grpo`` follows TRL's ``scale_rewards``).
"""

from rllm_plugins.extras import require_extra
from rllm_plugins.moved import keep_old_paths

require_extra("rllm_trl", "trl", ["trl", "torch"])

# import paths of the modules before they were grouped by role (docs/architecture.md)
OLD_PATHS = {"advantages": "outcome", "turn_advantages": "turns", "trajectories": "groups", "estimator_state": "state", "rollout_checks": "rollouts"}
keep_old_paths(__name__, OLD_PATHS)

from rllm_trl.config import AdvantageSettings, RLLMGRPOConfig, advantage_settings, check_trainer_setup
from rllm_trl.groups import advantages_from_trajectory_groups, compute_advantages_via_groups, to_trajectory_groups
from rllm_trl.mixin import RLLMAdvantageMixin
from rllm_trl.outcome import RewardBatch, combine_rewards, compute_advantages, compute_metrics, prepare_batch
from rllm_trl.trainer import RLLMGRPOTrainer
from rllm_trl.versions import check_trl_compatibility

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
