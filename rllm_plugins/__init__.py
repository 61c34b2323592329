"""rLLM-native advantage estimators, as a plugin package for verl and TRL.

Estimators are selected by name (``grpo``, ``rloo``, ... and those of installed plugins; the
command ``rllm-plugins estimators`` lists them). Trajectory groups with roles go in. Outcome-level
estimators give each trajectory one advantage, broadcast to its steps; step-level ones
(:mod:`rllm_plugins.steps`: ``gigpo``, ``turn_grpo``, ...) give each turn its own; estimators with
memory (``rae``) keep a running baseline across calls (:mod:`rllm_plugins.state`). Plugins are found by
:mod:`rllm_plugins.discovery`. The core API in 15 lines::

    from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups


    def group(task, role, rewards):
        return TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1, 2]), Step(response_ids=[3])], reward=r) for r in rewards], group_id=f"{task}:{role}")


    groups = [group("q1", "solver", [1.0, 0.0, 1.0]), group("q2", "solver", [0.0, 0.0]), group("q1", "judge", [1.0, 0.0])]
    config = AlgorithmConfig(estimator="grpo", estimator_map={"solver": "rloo"})  # judges use grpo, solvers rloo
    metrics = collect_reward_and_advantage_from_trajectory_groups(groups, config)

    print(groups[0].trajectories[0].steps[1].advantage)  # 0.5: every step carries its trajectory's advantage
    print(metrics["advantage/solver/mean"], metrics["reward/judge/mean"])

verl: install ``rllm-plugins[verl]`` and set ``algorithm.adv_estimator=rllm_<name>``. TRL: install
``rllm-plugins[trl]`` and use ``rllm_trl.RLLMGRPOConfig(adv_estimator="<name>")`` with
``rllm_trl.RLLMGRPOTrainer``. A plugin yields :class:`AdvEstimatorSpec` objects from the hook
``rllm_adv_estimators`` under the entry-point group ``rllm_plugins``. Advantage transforms (``clip``,
``scale``, ``kl_shaping`` and plugins' own: hook ``rllm_advantage_transforms``) run after the estimator:
``AlgorithmConfig(advantage_transforms=["clip", ...])`` (:mod:`rllm_plugins.transforms`). Reward shapers
(``dapo_overlong``, ``length_penalty``, ... and plugins' own: hook ``rllm_reward_shapers``) add terms to each unit's
reward before the estimator: ``AlgorithmConfig(reward_shapers=[...])`` (:mod:`rllm_plugins.shaping`).
"""

__version__ = "0.1.0"  # the distribution's version too (pyproject.toml reads it from here)

from .advantage import collect_reward_and_advantage_from_trajectory_groups
from .config import AlgorithmConfig, RolloutCorrectionConfig, build_algorithm_config, rLLMAdvantageEstimator
from .discovery.hookspecs import hookimpl
from .estimators import (
    calculate_grpo_advantages,
    calculate_prpo_advantages,
    calculate_reinforce_advantages,
    calculate_reinforce_plus_plus_baseline_advantages,
    calculate_rloo_advantages,
)
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
from .shaper_spec import ShaperSpec
from .shaping import available_shapers, register_reward_shaper, shape_rewards
from .spec import AdvEstimatorSpec
from .state.store import EstimatorState
from .transform_spec import TransformSpec
from .transforms import apply_transforms, available_transforms, register_advantage_transform
from .types import Step, Trajectory, TrajectoryGroup

__all__ = [
    "__version__",
    "AdvEstimatorSpec",
    "AlgorithmConfig",
    "EstimatorConflictError",
    "EstimatorState",
    "RolloutCorrectionConfig",
    "ShaperSpec",
    "Step",
    "Trajectory",
    "TrajectoryGroup",
    "TransformSpec",
    "UnknownEstimatorError",
    "apply_transforms",
    "available_estimators",
    "available_shapers",
    "available_transforms",
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
    "register_advantage_transform",
    "register_reward_shaper",
    "register_rllm_adv_estimator",
    "shape_rewards",
    "unregister_rllm_adv_estimator",
]
