"""ECHO (rLLM main's ``echo``, arXiv 2605.24517): GRPO's advantages, unchanged.

ECHO adds an auxiliary cross-entropy loss on environment-observation tokens, weighted by
``AlgorithmConfig.env_loss_coef`` (0.05 when ``echo`` is the estimator and the field is left None,
as rLLM main resolves it). That loss belongs to the trainer: the advantages here are ``grpo``'s,
the coefficient is stored in the config for rLLM code that reads it, and the verl and TRL adapters
train with their framework's own loss (no environment-token term) and say so at config time (``trainer_loss``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..spec import AdvEstimatorSpec, list_form_of
from .grpo import grpo


def echo(values: np.ndarray, offsets: np.ndarray, /, *, norm_adv_by_std_in_grpo: bool = True, epsilon: float = 1e-6, **_: Any) -> np.ndarray:
    """ECHO: GRPO's advantages (its environment-token loss is the trainer's, weighted by env_loss_coef)."""
    return grpo(values, offsets, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, epsilon=epsilon)


calculate_echo_advantages = list_form_of(echo, "calculate_echo_advantages")

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
ENV_LOSS = "ECHO's auxiliary cross-entropy loss on environment-observation tokens (env_loss_coef)"
SPECS: tuple[AdvEstimatorSpec, ...] = (AdvEstimatorSpec("echo", calculate_echo_advantages, echo, options=(), trainer_loss=ENV_LOSS),)
