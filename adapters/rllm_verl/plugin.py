"""Entry point of verl's ``verl.plugins`` group: registers the ``rllm_*`` estimators, installs the verl extensions.

verl (>= 0.9) imports every ``verl.plugins`` entry point while ``import verl`` runs, in every
process (driver, TaskRunner actor, workers), and swallows errors at DEBUG level; verl 0.7 and 0.8
import it there when ``VERL_USE_EXTERNAL_MODULES=rllm_verl.plugin`` (:mod:`rllm_verl.versions`). So this module
does its work at import time, as that contract requires, and never raises: a failure is logged as
a warning naming the cause, and verl keeps working without the ``rllm_*`` names. The extensions
(:mod:`rllm_verl.extension`) of verl's v1 ``compute_advantage_for_multi_trajectories``
(``multi_trajectories``, sessions), of ``ray_trainer.compute_advantage`` (``reward_keys``), of the v1
``PPOTrainer._compute_advantage`` (``v1_batch``), of the legacy trainer's ``compute_data_metrics`` (``transform_metrics``: the advantage transforms'
metrics) and of the trainers' checkpoint methods (``estimator_state``, the state of stateful estimators) are installed
lazily: each applies when verl imports the module it extends, not here, and only on a verl release that has that module
(the v1 ones from 0.9 on); on verl 0.8, ``sync_trainer`` refuses the ``rllm_*`` names in its TransferQueue trainer
``main_ppo_sync``.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

try:
    from rllm_verl.versions import verl_features

    _features = verl_features()
    for _problem in (_features.unsupported, _features.untested):
        if _problem:
            logger.warning("rllm-plugins: %s", _problem)
except Exception as error:
    logger.warning("rllm-plugins: could not read verl's version: %s: %s", type(error).__name__, error)

try:
    from rllm_verl.registration import register_estimators_into_verl

    register_estimators_into_verl()
except Exception as error:  # verl would hide it; say it once, loudly enough
    logger.warning("rllm-plugins: could not register the rllm_* advantage estimators into verl: %s: %s", type(error).__name__, error)

try:
    from rllm_verl.extension import install
    from rllm_verl.patches.checkpoints import CHECKPOINTS
    from rllm_verl.patches.legacy import REWARD_KEYS
    from rllm_verl.patches.metrics import TRANSFORM_METRICS
    from rllm_verl.patches.sessions import SESSIONS
    from rllm_verl.patches.sync_trainer import SYNC_TRAINER
    from rllm_verl.patches.v1 import V1_BATCH

    for _extension in (SESSIONS, REWARD_KEYS, V1_BATCH, SYNC_TRAINER, TRANSFORM_METRICS, *CHECKPOINTS):
        install(_extension)  # lazy, gated by the verl release (rllm_verl.versions), guarded, never raising; see rllm_verl.extension
except Exception as error:  # this guards the imports
    logger.warning("rllm-plugins: could not install the verl extensions: %s: %s", type(error).__name__, error)
