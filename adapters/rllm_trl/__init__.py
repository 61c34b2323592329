"""rLLM-native advantage estimators for TRL's ``GRPOTrainer``.

Swap ``GRPOConfig``/``GRPOTrainer`` for :class:`RLLMGRPOConfig`/:class:`RLLMGRPOTrainer` and set
``adv_estimator`` to any registered estimator name (``trl_grpo`` follows TRL's ``scale_rewards``).
"""

from rllm_plugins.extras import require_extra

require_extra("rllm_trl", "trl", ["trl", "torch"])

from .advantages import RewardBatch, combine_rewards, compute_advantages, compute_metrics, prepare_batch
from .config import AdvantageSettings, RLLMGRPOConfig, advantage_settings, check_trainer_setup
from .mixin import RLLMAdvantageMixin, check_trl_compatibility
from .trainer import RLLMGRPOTrainer
from .trajectories import advantages_from_trajectory_groups, compute_advantages_via_groups, to_trajectory_groups

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
