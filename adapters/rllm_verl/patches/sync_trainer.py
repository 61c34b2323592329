"""Refuse the ``rllm_*`` names in verl 0.8's TransferQueue trainer (``verl.trainer.main_ppo_sync``), by name.

That trainer computes advantages in its own ``compute_advantage_for_multi_trajectories(data, batch_keys, ...)``
(defined in ``main_ppo_sync``, called by its ``PPOTrainer._compute_advantage``), with only ``uid`` in the
batch and one row per output: an ``rllm_*`` estimator there would neither see sessions nor token ids, so
none of our extensions could apply. :data:`SYNC_TRAINER` wraps that function so that an ``rllm_*`` name
raises :data:`rllm_verl.versions.SYNC_TRAINER_REFUSAL` (the trainer to run instead) before anything is
computed; every other name goes to verl's function unchanged. Installed only where the release has that
trainer (``requires="sync_trainer"``); opt out with ``RLLM_PLUGINS_VERL_SYNC_TRAINER=0`` (then the
rows reach the estimator as verl hands them, each output its own trajectory).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from rllm_verl.extension import ADVANTAGE_PARAMETERS, NO_DEFAULT, Extension
from rllm_verl.versions import SYNC_TRAINER as MODULE
from rllm_verl.versions import SYNC_TRAINER_REFUSAL, verl_features

__all__ = ["SYNC_TRAINER", "SYNC_TRAINER_ENV"]

SYNC_TRAINER_ENV = "RLLM_PLUGINS_VERL_SYNC_TRAINER"


def extend(original: Callable[..., Any]) -> Callable[..., Any]:
    """verl 0.8's ``main_ppo_sync.compute_advantage_for_multi_trajectories``, refusing the ``rllm_*`` names."""

    @functools.wraps(original)
    def compute_advantage_for_multi_trajectories(data: Any, batch_keys: Any, adv_estimator: Any, *args: Any, **kwargs: Any) -> Any:
        from verl.trainer.ppo import core_algos

        registered = core_algos.ADV_ESTIMATOR_REGISTRY.get(adv_estimator) if isinstance(adv_estimator, str) else None
        if getattr(registered, "rllm_estimator", None) is not None:
            raise ValueError(SYNC_TRAINER_REFUSAL.format(name=adv_estimator, version=verl_features().version, module=MODULE))
        return original(data, batch_keys, adv_estimator, *args, **kwargs)

    return compute_advantage_for_multi_trajectories


SYNC_TRAINER = Extension(
    name="sync_trainer_refusal",
    module=MODULE,
    attribute="compute_advantage_for_multi_trajectories",
    parameters=(("data", NO_DEFAULT), ("batch_keys", NO_DEFAULT), *ADVANTAGE_PARAMETERS),
    make=extend,
    env=SYNC_TRAINER_ENV,
    requires="sync_trainer",
)
