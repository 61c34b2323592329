"""Advantage transforms in TRL: ``RLLMGRPOConfig(advantage_transforms=[...])``, after any estimator.

The chain is resolved and checked with the config (:func:`rllm_trl.config.check_trl_transforms`). Sequence-level
transforms run on the gathered batch, per role, on every process alike, inside the estimator's run
(:func:`rllm_plugins.run.run_outcome` and :func:`~rllm_plugins.run.run_steps`, as in the core collector; handed over
by :func:`sequence_transforms`): on the outcome path one value per completion (unscorable rows stay 0 and out of the
transforms; ``offsets`` group a role's scorable completions by prompt, ``rewards`` and ``lengths`` are theirs); on the
step path one value per turn of the scored completions (``offsets`` group a prompt's turns, ``rewards`` the turns'
rewards, ``turn_index`` and ``traj_offsets`` place them). ``scores`` are the ``rewards`` on both: TRL subtracts nothing
from a reward (its KL term is in the loss). A token-level transform (``kl_shaping``) and every
transform after it run here instead (:func:`transform_tokens`): the run holds one value per completion or turn of the
gathered batch, and the token log-probs they read exist only on each process's own rows. They run on this
process's rows, ``(B, T)``, with ``mask`` (the completion mask, times the tool mask where TRL has one),
``logprobs`` (TRL's ``old_per_token_logps``), ``ref_logprobs`` (``ref_per_token_logps``, present when
``beta > 0``) and, with several processes, ``sum_over_processes`` (accelerate's ``reduce`` with ``"sum"``): the
batch mean of ``kl_shaping`` is the whole batch's, as on one process, from two scalars per process (its KL sum and
token count). The transforms' metrics of this part are over this process's tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rllm_plugins.transforms import SelectedTransform, apply_transforms, split_chain
from rllm_plugins.transforms.stage import Transforms
from rllm_trl.config import TRANSFORMS_WHERE as WHERE

__all__ = ["sequence_transforms", "transform_tokens"]


def sequence_transforms(
    selected: Sequence[SelectedTransform], parts: Sequence[tuple[str, np.ndarray | None, np.ndarray | None]] | None = None
) -> tuple[Transforms | None, tuple[SelectedTransform, ...]]:
    """``(sequence part, token part)`` of the chain: the sequence part as the estimator's run applies it (:class:`~rllm_plugins.transforms.stage.Transforms`,
    None when empty; ``parts`` one per role on the turn path), the token part for :func:`transform_tokens`."""
    sequence_part, token_part = split_chain(selected)
    return (Transforms(sequence_part, WHERE, parts=parts) if sequence_part else None), token_part


def transform_tokens(
    local: Any, output: dict[str, Any], selected: Sequence[SelectedTransform], role: str, sum_over_processes: Callable[[np.ndarray], np.ndarray] | None = None
) -> tuple[np.ndarray, dict[str, float]]:
    """This process's advantages (``(B,)`` or ``(B, T)``) after the token part of the chain: ``(B, T)`` float64, 0 off the mask.

    ``sum_over_processes`` (the trainer's, over accelerate's processes; None on one process) is handed to the transforms
    that name it, so a batch statistic (``kl_shaping``'s mean) is the whole batch's."""
    mask = output["completion_mask"].detach().cpu().double().numpy()
    if output.get("tool_mask") is not None:
        mask = mask * output["tool_mask"].detach().cpu().double().numpy()
    values = local.detach().cpu().double().numpy()
    if values.ndim == 1:
        values = values[:, None] * mask
    context: dict[str, Any] = {"mask": mask}
    if sum_over_processes is not None:
        context["sum_over_processes"] = sum_over_processes
    for key, name in (("logprobs", "old_per_token_logps"), ("ref_logprobs", "ref_per_token_logps")):
        if output.get(name) is not None:
            context[key] = output[name].detach().cpu().double().numpy()
    if "logprobs" not in context and any("logprobs" in c.transform.spec.requires for c in selected):
        raise ValueError(
            f"{WHERE}: {selected[0].name!r} needs the policy's log-probs of the sampled tokens, which GRPOTrainer computes before the loss only "
            "when generation and optimisation steps differ (num_iterations > 1, steps_per_generation > gradient_accumulation_steps) or with vLLM's "
            "importance sampling; this step has none"
        )
    out, metrics = apply_transforms(values, selected, role=role, token_level=True, where=WHERE, **context)
    return out * mask, metrics
