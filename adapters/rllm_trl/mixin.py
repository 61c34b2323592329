"""``RLLMAdvantageMixin``: rLLM advantages inside any ``GRPOTrainer`` (TRL has no advantage hook).

Two private TRL methods are overridden (pinned by :func:`check_trl_compatibility`):

- ``_calculate_rewards`` returns the rewards of every process, ``(N_global, F)``; the mixin keeps
  them with the gathered completion lengths and roles;
- ``_generate_and_score_completions`` runs TRL's step, then recomputes the advantages on the
  global batch (groups of ``num_generations`` contiguous rows, ``num_generations_eval`` in eval,
  so groups straddling processes are whole), puts this process's rows into
  ``output["advantages"]`` and logs the rLLM metrics and the advantages used.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import torch
import trl
from accelerate.utils import gather_object
from trl import GRPOTrainer

from .advantages import RewardBatch, compute_advantages, compute_metrics, prepare_batch

__all__ = ["OVERRIDDEN_METHODS", "RLLMAdvantageMixin", "check_trl_compatibility"]

# method name -> parameter names it has in TRL 1.16 (and since 0.29)
OVERRIDDEN_METHODS: dict[str, tuple[str, ...]] = {
    "_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
    "_generate_and_score_completions": ("self", "inputs"),
}


def check_trl_compatibility(trainer_class: type = GRPOTrainer) -> None:
    """Raise ``RuntimeError`` if a private TRL method the mixin overrides changed its signature."""
    for name, expected in OVERRIDDEN_METHODS.items():
        method = getattr(trainer_class, name, None)
        found = tuple(inspect.signature(method).parameters) if method is not None else None
        if found != expected:
            raise RuntimeError(
                f"rllm_trl supports TRL whose {trainer_class.__name__}.{name} takes {expected}, but TRL {trl.__version__} has {found}; "
                "install a TRL version in the range rllm-plugins[trl] pins"
            )


class RLLMAdvantageMixin:
    """Put before ``GRPOTrainer`` (or a subclass of it) in the bases; configure with ``RLLMGRPOConfig`` fields.

    Reads ``args.adv_estimator``, ``args.norm_adv_by_std_in_grpo``, ``args.adv_estimator_kwargs``,
    ``args.adv_estimator_map`` and ``args.role_column`` (defaults: ``grpo``, True, {}, {}, None).
    After each generation, ``last_reward_batch`` and ``last_advantages`` hold the global batch
    and the ``(N_global,)`` advantages used.
    """

    last_reward_batch: RewardBatch | None = None
    last_advantages: np.ndarray | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        check_trl_compatibility(next((c for c in type(self).__mro__[1:] if "_calculate_rewards" in c.__dict__ and c is not RLLMAdvantageMixin), GRPOTrainer))
        super().__init__(*args, **kwargs)
        self._rllm_pending: dict[str, Any] | None = None

    def _calculate_rewards(
        self, inputs: list[dict[str, Any]], prompts: list[Any], completions: list[Any], completion_ids_list: list[list[int]]
    ) -> torch.Tensor:
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        device = rewards_per_func.device
        lengths = self.accelerator.gather(torch.tensor([len(ids) for ids in completion_ids_list], device=device))
        roles = None
        role_column = getattr(self.args, "role_column", None)
        if role_column is not None:
            missing = [i for i, example in enumerate(inputs) if role_column not in example]
            if missing:
                raise ValueError(f"role_column={role_column!r}: example {missing[0]} of this batch has no such column (columns: {sorted(inputs[missing[0]])})")
            roles = gather_object([str(example[role_column]) for example in inputs])
        self._rllm_pending = {"rewards_per_func": rewards_per_func, "lengths": lengths, "roles": roles}
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        pending, self._rllm_pending = self._rllm_pending, None
        if pending is None:
            raise RuntimeError("GRPOTrainer._generate_and_score_completions did not call _calculate_rewards; this TRL version is not supported")
        mode = "train" if self.model.training else "eval"
        args = self.args
        batch = prepare_batch(
            pending["rewards_per_func"],
            self.reward_weights,
            self.num_generations if mode == "train" else self.num_generations_eval,
            roles=pending["roles"],
            lengths=pending["lengths"],
        )
        advantages = compute_advantages(
            batch,
            getattr(args, "adv_estimator", "grpo"),
            estimator_map=getattr(args, "adv_estimator_map", None),
            norm_adv_by_std_in_grpo=getattr(args, "norm_adv_by_std_in_grpo", True),
            estimator_kwargs=getattr(args, "adv_estimator_kwargs", None),
        )
        local = output["advantages"]
        start = self.accelerator.process_index * local.shape[0]
        output["advantages"] = torch.as_tensor(advantages[start : start + local.shape[0]], dtype=torch.float32, device=local.device)
        self.last_reward_batch, self.last_advantages = batch, advantages
        self._log_rllm(mode, batch, advantages)
        return output

    def _log_rllm(self, mode: str, batch: RewardBatch, advantages: np.ndarray) -> None:
        """Add the rLLM metrics to TRL's and replace the advantages TRL just logged with ``advantages``."""
        for key, value in compute_metrics(batch, advantages).items():
            self._metrics[mode][key].append(value)
        logged = self._logs["advantages"]
        for _ in range(min(len(logged), advantages.size)):
            logged.pop()
        logged.extend(advantages.tolist())
