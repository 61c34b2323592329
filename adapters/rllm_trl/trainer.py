"""``RLLMGRPOTrainer``: TRL's ``GRPOTrainer`` with advantages from an rLLM estimator."""

from __future__ import annotations

from trl import GRPOTrainer

from rllm_trl.mixin import RLLMAdvantageMixin

__all__ = ["RLLMGRPOTrainer"]


class RLLMGRPOTrainer(RLLMAdvantageMixin, GRPOTrainer):
    """``GRPOTrainer`` whose advantages come from ``args.adv_estimator`` (use with ``RLLMGRPOConfig``)."""
