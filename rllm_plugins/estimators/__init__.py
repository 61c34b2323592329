"""The built-in estimators: each a batched function over flat groups plus its rLLM list form."""

from __future__ import annotations

from ..spec import AdvEstimatorSpec
from .grpo import calculate_grpo_advantages, grpo
from .grpo_passk import calculate_grpo_passk_advantages, grpo_passk
from .opo import calculate_opo_advantages, opo
from .prpo import calculate_prpo_advantages, calculate_prpo_std_optional_advantages, prpo, prpo_std_optional
from .reinforce import calculate_reinforce_advantages, reinforce
from .reinforce_plus_plus_baseline import calculate_reinforce_plus_plus_baseline_advantages, reinforce_plus_plus_baseline
from .rloo import calculate_rloo_advantages, rloo
from .trl_compat import calculate_trl_grpo_advantages, calculate_trl_grpo_batch_advantages, trl_grpo, trl_grpo_batch

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
BUILTIN_SPECS: tuple[AdvEstimatorSpec, ...] = (
    AdvEstimatorSpec("grpo", calculate_grpo_advantages, grpo, options=()),
    AdvEstimatorSpec("reinforce", calculate_reinforce_advantages, reinforce, options=()),
    AdvEstimatorSpec("reinforce_plus_plus_baseline", calculate_reinforce_plus_plus_baseline_advantages, reinforce_plus_plus_baseline, options=()),
    AdvEstimatorSpec("rloo", calculate_rloo_advantages, rloo, options=()),
    AdvEstimatorSpec("prpo", calculate_prpo_advantages, prpo, options=()),
    AdvEstimatorSpec("prpo_std_optional", calculate_prpo_std_optional_advantages, prpo_std_optional, options=()),
    AdvEstimatorSpec("opo", calculate_opo_advantages, opo, options=()),
    AdvEstimatorSpec("grpo_passk", calculate_grpo_passk_advantages, grpo_passk, options=()),
    AdvEstimatorSpec("trl_grpo", calculate_trl_grpo_advantages, trl_grpo, options=()),
    AdvEstimatorSpec("trl_grpo_batch", calculate_trl_grpo_batch_advantages, trl_grpo_batch, options=()),
)

__all__ = [
    "BUILTIN_SPECS",
    "calculate_grpo_advantages",
    "calculate_grpo_passk_advantages",
    "calculate_opo_advantages",
    "calculate_prpo_advantages",
    "calculate_prpo_std_optional_advantages",
    "calculate_reinforce_advantages",
    "calculate_reinforce_plus_plus_baseline_advantages",
    "calculate_rloo_advantages",
    "calculate_trl_grpo_advantages",
    "calculate_trl_grpo_batch_advantages",
]
