"""Entry point of verl's ``verl.plugins`` group: registers the ``rllm_*`` estimators, extends the v1 sessions path.

verl (>= 0.9) imports every ``verl.plugins`` entry point while ``import verl`` runs, in every
process (driver, TaskRunner actor, workers), and swallows errors at DEBUG level. So this module
does its work at import time, as that contract requires, and never raises: a failure is logged as
a warning naming the cause, and verl keeps working without the ``rllm_*`` names. The session
extension of verl's v1 ``compute_advantage_for_multi_trajectories`` (see ``multi_trajectories``)
is installed lazily: it applies when verl's v1 trainer is imported, not here.
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
    from .multi_trajectories import install_session_extension

    install_session_extension()
except Exception as error:  # install never raises; this guards its import
    logger.warning("rllm-plugins: could not install the verl session extension: %s: %s", type(error).__name__, error)
