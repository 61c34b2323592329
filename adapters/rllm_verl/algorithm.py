"""The ``AlgorithmConfig`` of the rLLM-style verl path (``dataproto_to_groups`` -> collector -> ``apply_advantages``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rllm_plugins.config import AlgorithmConfig, build_algorithm_config

__all__ = ["check_no_per_role_loss", "verl_algorithm_config"]


def check_no_per_role_loss(config: AlgorithmConfig) -> AlgorithmConfig:
    """Raise ``ValueError`` if ``config`` asks for a per-role policy loss: verl trains every role with one actor loss."""
    if config.loss_fn_map:
        pairs = ", ".join(f"{role!r}: ({config.estimator_name(role)!r}, {loss!r})" for role, loss in config.loss_fn_map.items())
        raise ValueError(
            f"per-role policy losses ({pairs}) are not applied with verl: its actor uses actor_rollout_ref.actor.policy_loss.loss_mode "
            "for every row (rLLM applies a per-role loss only in its own backends). Give the estimator name alone, e.g. {'judge': 'rloo'}"
        )
    return config


def verl_algorithm_config(config: Any, traj_group_adv_estimator_map: Mapping[str, Any] | None = None) -> AlgorithmConfig:
    """:func:`rllm_plugins.build_algorithm_config` (rLLM's trainer wiring) for verl: a per-role loss raises ``ValueError``."""
    return check_no_per_role_loss(build_algorithm_config(config, traj_group_adv_estimator_map))
