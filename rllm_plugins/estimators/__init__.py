"""The built-in estimators: each a batched function over flat groups plus its rLLM list form."""

from __future__ import annotations

from collections.abc import Mapping
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

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
BUILTIN_SPECS: tuple[AdvEstimatorSpec, ...] = (
    AdvEstimatorSpec("grpo", calculate_grpo_advantages, grpo, options=()),
    AdvEstimatorSpec("reinforce", calculate_reinforce_advantages, reinforce, options=()),
    AdvEstimatorSpec("reinforce_plus_plus_baseline", calculate_reinforce_plus_plus_baseline_advantages, reinforce_plus_plus_baseline, options=()),
    AdvEstimatorSpec("rloo", calculate_rloo_advantages, rloo, options=()),
    AdvEstimatorSpec("echo", calculate_echo_advantages, echo, options=()),
    AdvEstimatorSpec("prpo", calculate_prpo_advantages, prpo, options=()),
    AdvEstimatorSpec("prpo_std_optional", calculate_prpo_std_optional_advantages, prpo_std_optional, options=()),
    AdvEstimatorSpec("opo", calculate_opo_advantages, opo, options=()),
    AdvEstimatorSpec("grpo_passk", calculate_grpo_passk_advantages, grpo_passk, options=()),
    AdvEstimatorSpec("trl_grpo", calculate_trl_grpo_advantages, trl_grpo, options=()),
    AdvEstimatorSpec("trl_grpo_batch", calculate_trl_grpo_batch_advantages, trl_grpo_batch, options=()),
    AdvEstimatorSpec("dr_grpo", calculate_dr_grpo_advantages, dr_grpo, options=()),
    AdvEstimatorSpec("maxrl", calculate_maxrl_advantages, maxrl, options=()),
    AdvEstimatorSpec("passk_training", calculate_passk_training_advantages, passk_training, options=(), check_group_size=check_passk_group_size),
    AdvEstimatorSpec("pkpo", calculate_pkpo_advantages, pkpo, options=(), check_group_size=check_pkpo_group_size, check_options=check_pkpo_options),
    AdvEstimatorSpec("minus_length_weighted_mean", calculate_minus_length_weighted_mean_advantages, minus_length_weighted_mean, options=()),
    AdvEstimatorSpec("gpg", calculate_gpg_advantages, gpg, options=()),
    AdvEstimatorSpec("verl_grpo", calculate_verl_grpo_advantages, verl_grpo, options=()),
    AdvEstimatorSpec("verl_rloo_vectorized", calculate_verl_rloo_vectorized_advantages, verl_rloo_vectorized, options=()),
    AdvEstimatorSpec(
        "verl_reinforce_plus_plus_baseline", calculate_verl_reinforce_plus_plus_baseline_advantages, verl_reinforce_plus_plus_baseline, options=()
    ),
    AdvEstimatorSpec(
        "gigpo",
        calculate_gigpo_advantages,
        gigpo,
        options=(),
        level="step",
        needs_anchors=True,
        check_options=check_gigpo_options,
        breaks={
            "option_sensitivity:similarity_autojunk": "difflib's autojunk changes a ratio only for states of 200+ elements, and only with "
            "anchor_similarity set; the samples' states are short (tests/steps/test_anchor_similarity.py checks it on long ones)"
        },
    ),
    AdvEstimatorSpec(
        "rae",
        batched=rae,
        options=(),
        stateful=True,
        group_order_invariant=False,
        check_options=check_rae_options,
        state_schema=RAE_STATE_SCHEMA,
        breaks={"permutation": "each trajectory's baseline is the running mean of those scanned before it: the scan order is part of the estimate"},
    ),
    AdvEstimatorSpec(
        "step_reinforce", calculate_step_reinforce_advantages, step_reinforce, options=(), level="step", check_options=check_step_reinforce_options
    ),
    AdvEstimatorSpec(
        "composite",
        calculate_composite_advantages,
        composite,
        options=(),
        level="step",
        check_options=check_composite_options,
        check_group_size=check_composite_group_size,
        needs_for=composite_needs,
    ),
    AdvEstimatorSpec("turn_grpo", calculate_turn_grpo_advantages, turn_grpo, options=(), level="step", check_options=check_turn_grpo_options),
    AdvEstimatorSpec(
        "turn_credit",
        calculate_turn_credit_advantages,
        turn_credit,
        options=(),
        level="step",
        check_options=check_turn_credit_options,
    ),
    AdvEstimatorSpec("turn_gae", calculate_turn_gae_advantages, turn_gae, options=(), level="step", needs_values=True, check_options=check_turn_gae_options),
)


def check_group_size(spec: AdvEstimatorSpec, options: Mapping[str, Any], group_size: int) -> None:
    """Config-time check of an estimator's ``options`` against the configured group size (trajectories per prompt).

    Runs the spec's own ``check_group_size`` (``passk_training``'s ``k``; a plugin may declare one); others pass.
    """
    if spec.check_group_size is not None:
        spec.check_group_size(options, group_size)


__all__ = [
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
    "calculate_turn_gae_advantages",
    "calculate_turn_credit_advantages",
    "calculate_turn_grpo_advantages",
    "calculate_trl_grpo_batch_advantages",
    "calculate_verl_grpo_advantages",
    "calculate_verl_reinforce_plus_plus_baseline_advantages",
    "calculate_verl_rloo_vectorized_advantages",
    "check_group_size",
]
