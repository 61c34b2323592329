"""verl adapter of rllm-plugins: the ``rllm_*`` advantage estimators in verl's registry, DataProto <-> groups."""

from rllm_plugins.extras import require_extra

require_extra("rllm_verl", "verl", ["verl", "torch"])

from .algorithm import verl_algorithm_config
from .bridge import ESTIMATOR_KWARGS_KEY, compute_rllm_advantage, verl_estimator
from .dataproto import ROW_ID_KEY, apply_advantages, dataproto_to_groups
from .registration import VERL_PREFIX, register_estimators_into_verl, rllm_names_in_verl, verl_name

__all__ = [
    "ESTIMATOR_KWARGS_KEY",
    "ROW_ID_KEY",
    "VERL_PREFIX",
    "apply_advantages",
    "compute_rllm_advantage",
    "dataproto_to_groups",
    "register_estimators_into_verl",
    "rllm_names_in_verl",
    "verl_algorithm_config",
    "verl_estimator",
    "verl_name",
]
