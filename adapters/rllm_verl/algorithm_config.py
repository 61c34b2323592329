"""The ``AlgorithmConfig`` of the rLLM-style verl path (``dataproto_to_groups`` -> collector -> ``apply_advantages``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rllm_plugins.config import AlgorithmConfig, build_algorithm_config, refuse_per_role_losses

__all__ = ["check_no_per_role_loss", "verl_algorithm_config"]


def check_no_per_role_loss(config: AlgorithmConfig) -> AlgorithmConfig:
    """Raise ``ValueError`` if ``config`` asks for a per-role policy loss: verl trains every role with one actor loss."""
    return refuse_per_role_losses(config, "verl", "its actor uses actor_rollout_ref.actor.policy_loss.loss_mode for every row")


def verl_algorithm_config(config: Any, traj_group_adv_estimator_map: Mapping[str, Any] | None = None) -> AlgorithmConfig:
    """:func:`rllm_plugins.build_algorithm_config` (rLLM's trainer wiring) for verl: a per-role loss raises ``ValueError``."""
    return check_no_per_role_loss(build_algorithm_config(config, traj_group_adv_estimator_map))
