"""Entry point of verl's ``verl.plugins`` group: importing it registers the ``rllm_*`` estimators.

verl (>= 0.9) imports every ``verl.plugins`` entry point while ``import verl`` runs, in every
process (driver, TaskRunner actor, workers), and swallows errors at DEBUG level. So this module
does its work at import time, as that contract requires, and never raises: a failure is logged as
a warning naming the cause, and verl keeps working without the ``rllm_*`` names.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

try:
    from .registration import register_estimators_into_verl

    register_estimators_into_verl()
except Exception as error:  # verl would hide it; say it once, loudly enough
    logger.warning("rllm-plugins: could not register the rllm_* advantage estimators into verl: %s: %s", type(error).__name__, error)

try:
    from .reward_keys import install

    install()  # guarded and never raising itself; see rllm_verl.reward_keys
except Exception as error:
    logger.warning("rllm-plugins: could not extend verl's compute_advantage: %s: %s", type(error).__name__, error)
