"""The built-in estimators: each a batched function over flat groups plus its rLLM list form.

Each estimator module declares its specs beside its code, as a module-level
``SPECS: tuple[AdvEstimatorSpec, ...]`` (:mod:`.prpo` and :mod:`.trl_compat` declare two each).
:data:`BUILTIN_MODULES` is the one list of those modules; :data:`BUILTIN_SPECS` collects every
module's ``SPECS`` in the list's order, and :mod:`.builtin` registers them as the first plugin.
A new built-in joins by adding its module name to :data:`BUILTIN_MODULES`
(``tests/core/test_builtin_specs_beside_code.py`` checks that none is left out).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from typing import Any

from ..spec import AdvEstimatorSpec
from .composite import calculate_composite_advantages, check_composite_group_size, check_composite_options, composite, composite_needs
from .dr_grpo import calculate_dr_grpo_advantages, dr_grpo
from .echo import calculate_echo_advantages, echo
from .gigpo import calculate_gigpo_advantages, check_gigpo_options, gigpo
from .gpg import calculate_gpg_advantages, gpg
from .grpo import calculate_grpo_advantages, grpo
from .grpo_passk import calculate_grpo_passk_advantages, grpo_passk
from .maxrl import calculate_maxrl_advantages, maxrl
from .minus_length_weighted_mean import calculate_minus_length_weighted_mean_advantages, minus_length_weighted_mean
from .opo import calculate_opo_advantages, opo
from .passk_training import calculate_passk_training_advantages, check_passk_group_size, passk_training
from .pkpo import calculate_pkpo_advantages, check_pkpo_group_size, check_pkpo_options, pkpo
from .prpo import calculate_prpo_advantages, calculate_prpo_std_optional_advantages, prpo, prpo_std_optional
from .rae import STATE_SCHEMA as RAE_STATE_SCHEMA
from .rae import check_rae_options, rae
from .reinforce import calculate_reinforce_advantages, reinforce
from .reinforce_plus_plus_baseline import calculate_reinforce_plus_plus_baseline_advantages, reinforce_plus_plus_baseline
from .rloo import calculate_rloo_advantages, rloo
from .step_reinforce import calculate_step_reinforce_advantages, check_step_reinforce_options, step_reinforce
from .trl_compat import calculate_trl_grpo_advantages, calculate_trl_grpo_batch_advantages, trl_grpo, trl_grpo_batch
from .turn_credit import calculate_turn_credit_advantages, check_turn_credit_options, turn_credit
from .turn_gae import calculate_turn_gae_advantages, check_turn_gae_options, turn_gae
from .turn_grpo import calculate_turn_grpo_advantages, check_turn_grpo_options, turn_grpo
from .verl_grpo import calculate_verl_grpo_advantages, verl_grpo
from .verl_reinforce_plus_plus_baseline import calculate_verl_reinforce_plus_plus_baseline_advantages, verl_reinforce_plus_plus_baseline
from .verl_rloo_vectorized import calculate_verl_rloo_vectorized_advantages, verl_rloo_vectorized

# the modules declaring the built-ins' SPECS, in the order the registry lists them (every option of a
# built-in is a named parameter, so each declares options=()); the imports above are the package's
# public names, reached as rllm_plugins.estimators.<name>
BUILTIN_MODULES: tuple[str, ...] = (
    "grpo",
    "reinforce",
    "reinforce_plus_plus_baseline",
    "rloo",
    "echo",
    "prpo",
    "opo",
    "grpo_passk",
    "trl_compat",
    "dr_grpo",
    "maxrl",
    "passk_training",
    "pkpo",
    "minus_length_weighted_mean",
    "gpg",
    "verl_grpo",
    "verl_rloo_vectorized",
    "verl_reinforce_plus_plus_baseline",
    "gigpo",
    "rae",
    "step_reinforce",
    "composite",
    "turn_grpo",
    "turn_credit",
    "turn_gae",
)

BUILTIN_SPECS: tuple[AdvEstimatorSpec, ...] = tuple(spec for module in BUILTIN_MODULES for spec in import_module(f".{module}", __name__).SPECS)


def check_group_size(spec: AdvEstimatorSpec, options: Mapping[str, Any], group_size: int) -> None:
    """Config-time check of an estimator's ``options`` against the configured group size (trajectories per prompt).

    Runs the spec's own ``check_group_size`` (``passk_training``'s ``k``; a plugin may declare one); others pass.
    """
    if spec.check_group_size is not None:
        spec.check_group_size(options, group_size)


__all__ = [
    "BUILTIN_MODULES",
    "BUILTIN_SPECS",
    "calculate_composite_advantages",
    "calculate_dr_grpo_advantages",
    "calculate_echo_advantages",
    "calculate_gigpo_advantages",
    "calculate_gpg_advantages",
    "calculate_grpo_advantages",
    "calculate_grpo_passk_advantages",
    "calculate_maxrl_advantages",
    "calculate_minus_length_weighted_mean_advantages",
    "calculate_opo_advantages",
    "calculate_passk_training_advantages",
    "calculate_pkpo_advantages",
    "calculate_prpo_advantages",
    "calculate_prpo_std_optional_advantages",
    "calculate_reinforce_advantages",
    "calculate_reinforce_plus_plus_baseline_advantages",
    "calculate_rloo_advantages",
    "calculate_step_reinforce_advantages",
    "calculate_trl_grpo_advantages",
    "calculate_trl_grpo_batch_advantages",
    "calculate_turn_credit_advantages",
    "calculate_turn_gae_advantages",
    "calculate_turn_grpo_advantages",
    "calculate_verl_grpo_advantages",
    "calculate_verl_reinforce_plus_plus_baseline_advantages",
    "calculate_verl_rloo_vectorized_advantages",
    "check_composite_group_size",
    "check_composite_options",
    "check_gigpo_options",
    "check_group_size",
    "check_passk_group_size",
    "check_pkpo_group_size",
    "check_pkpo_options",
    "check_rae_options",
    "check_step_reinforce_options",
    "check_turn_credit_options",
    "check_turn_gae_options",
    "check_turn_grpo_options",
    "composite",
    "dr_grpo",
    "echo",
    "gigpo",
    "gpg",
    "grpo",
    "grpo_passk",
    "maxrl",
    "minus_length_weighted_mean",
    "opo",
    "passk_training",
    "pkpo",
    "prpo",
    "prpo_std_optional",
    "rae",
    "reinforce",
    "reinforce_plus_plus_baseline",
    "rloo",
    "step_reinforce",
    "trl_grpo",
    "trl_grpo_batch",
    "turn_credit",
    "turn_gae",
    "turn_grpo",
    "verl_grpo",
    "verl_reinforce_plus_plus_baseline",
    "verl_rloo_vectorized",
    "composite_needs",
    "RAE_STATE_SCHEMA",
]
