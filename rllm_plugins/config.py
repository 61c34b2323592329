"""``rLLMAdvantageEstimator`` and ``AlgorithmConfig``: which estimator each role uses, and how."""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

from .aggregation import check_aggregation
from .spec import normalize_name

__all__ = ["AlgorithmConfig", "rLLMAdvantageEstimator"]


class rLLMAdvantageEstimator(str, Enum):  # noqa: N801 - rLLM's public name
    """The estimators rLLM names; any other string maps to ``OTHER``."""

    GRPO = "grpo"
    REINFORCE = "reinforce"
    REINFORCE_PLUS_PLUS_BASELINE = "reinforce_plus_plus_baseline"
    RLOO = "rloo"
    OTHER = "other"

    @classmethod
    def _missing_(cls, value: object) -> rLLMAdvantageEstimator:
        if isinstance(value, str):
            for member in cls:
                if member.value == value.strip().lower():
                    return member
        return cls.OTHER


EstimatorName = rLLMAdvantageEstimator | str

_PER_STEP_DEPRECATION = (
    "stepwise_advantage_mode='per_step' is deprecated: rLLM-native advantages are broadcast "
    "(every step of a trajectory gets the trajectory's advantage). Using 'broadcast'."
)


def _as_estimator(name: EstimatorName) -> EstimatorName:
    """Known names become the enum member; custom (registered) names stay strings, never ``OTHER``."""
    key = normalize_name(name)
    return rLLMAdvantageEstimator(key) if key in _KNOWN else key


_KNOWN = frozenset(m.value for m in rLLMAdvantageEstimator)


@dataclass
class AlgorithmConfig:
    """Configuration of rLLM-native advantage computation (the spec's fields, plus two).

    ``estimator`` is the default for every role; ``estimator_map`` maps a group role
    (``TrajectoryGroup.group_role``) to another estimator. Either may name a registered
    custom or plugin estimator. ``estimator_kwargs`` are passed to every estimator call.

    Trajectories may carry several named rewards in ``Trajectory.metadata["rewards"]`` (a mapping
    name -> number or None); ``multi_objective_aggregation`` then combines them, with
    ``reward_weights`` (name -> weight, default 1): ``"sum_then_normalize"`` runs the estimator on
    the weighted sum, ``"normalize_then_sum"`` (GDPO) on each reward, sums the weighted
    advantages and whitens them over the role (see :mod:`rllm_plugins.aggregation`).
    """

    use_rllm: bool = False
    estimator: EstimatorName = rLLMAdvantageEstimator.GRPO
    estimator_map: dict[str, EstimatorName] = field(default_factory=dict)
    stepwise_advantage_mode: Literal["broadcast", "per_step"] = "broadcast"
    norm_adv_by_std_in_grpo: bool = True
    use_precomputed_advantage: bool = False
    loss_fn: Literal["importance_sampling", "ppo", "cispo", "dro", "cross_entropy"] | None = None
    lr_schedule: Literal["linear", "cosine", "constant"] = "constant"
    warmup_steps_ratio: float = 0.0
    estimator_kwargs: dict[str, Any] = field(default_factory=dict)
    multi_objective_aggregation: Literal["sum_then_normalize", "normalize_then_sum"] = "sum_then_normalize"
    reward_weights: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.stepwise_advantage_mode == "per_step":
            warnings.warn(_PER_STEP_DEPRECATION, DeprecationWarning, stacklevel=3)
            self.stepwise_advantage_mode = "broadcast"
        if self.stepwise_advantage_mode != "broadcast":
            raise ValueError(f"stepwise_advantage_mode must be 'broadcast' (or the deprecated 'per_step'), got {self.stepwise_advantage_mode!r}")
        self.estimator = _as_estimator(self.estimator)
        self.estimator_map = {str(role): _as_estimator(name) for role, name in dict(self.estimator_map).items()}
        self.estimator_kwargs = dict(self.estimator_kwargs)
        check_aggregation(self.multi_objective_aggregation, "AlgorithmConfig.multi_objective_aggregation")
        if not isinstance(self.reward_weights, Mapping):
            got = f"{type(self.reward_weights).__name__} {self.reward_weights!r}"
            raise ValueError(f"AlgorithmConfig.reward_weights must map reward names to weights, got {got}")
        for name, weight in self.reward_weights.items():
            if not isinstance(name, str) or isinstance(weight, bool) or not isinstance(weight, numbers.Real) or not math.isfinite(weight):
                raise ValueError(f"AlgorithmConfig.reward_weights[{name!r}] must be a finite number keyed by a reward name, got {weight!r}")
        self.reward_weights = {name: float(weight) for name, weight in self.reward_weights.items()}

    def estimator_name(self, role: str) -> str:
        """Registry name of the estimator ``role`` uses."""
        return normalize_name(self.estimator_map.get(role, self.estimator))

    @classmethod
    def from_config(cls, config: Any) -> AlgorithmConfig:
        """Build from an OmegaConf ``DictConfig`` or a plain nested mapping, reading rLLM's keys.

        ``algorithm.adv_estimator`` (else ``rllm.algorithm.adv_estimator``), ``rllm.stepwise_advantage.
        {mode, norm_adv_by_std_in_grpo, use_rllm}``, ``rllm.algorithm.{use_precomputed_advantage,
        loss_fn, lr_schedule, warmup_steps_ratio, estimator_map, estimator_kwargs, multi_objective_aggregation,
        reward_weights}``.
        """

        def get(path: str, default: Any = None) -> Any:
            node = config
            for key in path.split("."):
                if node is None:
                    return default
                node = node.get(key) if isinstance(node, Mapping) or hasattr(node, "get") else getattr(node, key, None)
            return default if node is None else _plain(node)

        stepwise = "rllm.stepwise_advantage"
        return cls(
            estimator=get("algorithm.adv_estimator") or get("rllm.algorithm.adv_estimator", rLLMAdvantageEstimator.GRPO),
            estimator_map=get("rllm.algorithm.estimator_map", {}),
            stepwise_advantage_mode=get(f"{stepwise}.mode", "broadcast"),
            norm_adv_by_std_in_grpo=get(f"{stepwise}.norm_adv_by_std_in_grpo", get("algorithm.norm_adv_by_std_in_grpo", True)),
            use_rllm=get(f"{stepwise}.use_rllm", get("rllm.algorithm.use_rllm", False)),
            use_precomputed_advantage=get("rllm.algorithm.use_precomputed_advantage", False),
            loss_fn=get("rllm.algorithm.loss_fn"),
            lr_schedule=get("rllm.algorithm.lr_schedule", "constant"),
            warmup_steps_ratio=get("rllm.algorithm.warmup_steps_ratio", 0.0),
            estimator_kwargs=get("rllm.algorithm.estimator_kwargs", {}),
            multi_objective_aggregation=get("rllm.algorithm.multi_objective_aggregation", "sum_then_normalize"),
            reward_weights=get("rllm.algorithm.reward_weights", {}),
        )


def _plain(node: Any) -> Any:
    """DictConfig/ListConfig (or any mapping) -> plain dicts and lists, without importing omegaconf."""
    if isinstance(node, str):
        return node
    if isinstance(node, Mapping) or (hasattr(node, "items") and hasattr(node, "keys")):
        return {k: _plain(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)) or type(node).__name__ == "ListConfig":
        return [_plain(v) for v in node]
    return node
