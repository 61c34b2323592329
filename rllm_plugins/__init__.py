"""rLLM-native outcome advantage estimators, as a plugin package for verl and TRL."""

__version__ = "0.1.0"  # the distribution's version too (pyproject.toml reads it from here)

from .advantage import collect_reward_and_advantage_from_trajectory_groups
from .config import AlgorithmConfig, RolloutCorrectionConfig, build_algorithm_config, rLLMAdvantageEstimator
from .estimators import (
    calculate_grpo_advantages,
    calculate_prpo_advantages,
    calculate_reinforce_advantages,
    calculate_reinforce_plus_plus_baseline_advantages,
    calculate_rloo_advantages,
)
from .hookspecs import hookimpl
from .registry import (
    EstimatorConflictError,
    UnknownEstimatorError,
    available_estimators,
    get_adv_estimator,
    get_estimator_spec,
    get_rllm_adv_estimator,
    register_adv_estimator,
    register_rllm_adv_estimator,
    unregister_rllm_adv_estimator,
)
from .rl_algo import calculate_grpo_advantages_per_group, calculate_rloo_advantages_per_group
from .spec import AdvEstimatorSpec
from .types import Step, Trajectory, TrajectoryGroup

__all__ = [
    "__version__",
    "AdvEstimatorSpec",
    "AlgorithmConfig",
    "EstimatorConflictError",
    "RolloutCorrectionConfig",
    "Step",
    "Trajectory",
    "TrajectoryGroup",
    "UnknownEstimatorError",
    "available_estimators",
    "build_algorithm_config",
    "calculate_grpo_advantages",
    "calculate_grpo_advantages_per_group",
    "calculate_prpo_advantages",
    "calculate_reinforce_advantages",
    "calculate_reinforce_plus_plus_baseline_advantages",
    "calculate_rloo_advantages",
    "calculate_rloo_advantages_per_group",
    "collect_reward_and_advantage_from_trajectory_groups",
    "get_adv_estimator",
    "get_estimator_spec",
    "get_rllm_adv_estimator",
    "hookimpl",
    "rLLMAdvantageEstimator",
    "register_adv_estimator",
    "register_rllm_adv_estimator",
    "unregister_rllm_adv_estimator",
]
