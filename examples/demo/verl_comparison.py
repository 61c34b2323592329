"""verl's own ``compute_advantage`` on a toy-task ``DataProto``: the ``rllm_*`` estimators next to verl's same-named ones.

``import verl`` loads the ``verl.plugins`` entry point of rllm-plugins, which registers ``rllm_<name>``
for every installed estimator; nothing else is needed to select them by name.
"""

from __future__ import annotations

import logging
import uuid
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from task import build_task_tokenizer, exact_match_reward

if TYPE_CHECKING:
    from verl import DataProto

__all__ = ["COMPARED", "ROLLOUTS", "Comparison", "build_dataproto", "compare_with_verl"]

# (prompt, answer, responses): groups of 4, 3, 2 and 1 responses of uneven token lengths
ROLLOUTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("1+2=", "3", ("3", "12", "3", "5=")),
    ("2+2=", "4", ("4", "4", "40")),
    ("3+3=", "6", ("5", "33")),
    ("0+3=", "3", ("3",)),
)

# rllm-plugins' estimator, then verl's own ones of the same family, as algorithm.adv_estimator names them
COMPARED: tuple[tuple[str, ...], ...] = (("rllm_grpo", "grpo"), ("rllm_rloo", "rloo", "rloo_vectorized"))


@dataclass(frozen=True)
class Comparison:
    """Per-row inputs and the advantage each estimator gave (one value per row: the advantage of every response token)."""

    prompts: list[str]
    responses: list[str]
    lengths: list[int]
    rewards: list[float]
    advantages: dict[str, list[float]]


def build_dataproto(rollouts: Sequence[tuple[str, str, tuple[str, ...]]] = ROLLOUTS) -> DataProto:
    """A verl ``DataProto`` as a rollout leaves it: ``uid`` per prompt, right-padded responses, reward on the last token."""
    from verl import DataProto

    tokenizer = build_task_tokenizer()
    prompts, responses, answers = [], [], []
    for prompt, answer, group in rollouts:
        for response in group:
            prompts.append(prompt)
            responses.append(response)
            answers.append(answer)
    token_ids = [[*tokenizer(r).input_ids, tokenizer.eos_token_id] for r in responses]
    width = max(map(len, token_ids))
    mask = torch.zeros(len(token_ids), width)
    for row, ids in enumerate(token_ids):
        mask[row, : len(ids)] = 1.0
    lengths = mask.sum(-1).long()
    scores = torch.tensor(exact_match_reward(responses, answers))
    token_level_rewards = torch.zeros_like(mask)
    token_level_rewards[torch.arange(len(token_ids)), lengths - 1] = scores
    uid_of = {prompt: str(uuid.uuid4()) for prompt, _, _ in rollouts}
    return DataProto.from_dict(
        tensors={"token_level_rewards": token_level_rewards, "response_mask": mask},
        non_tensors={
            "uid": np.array([uid_of[p] for p in prompts], dtype=object),
            "prompt": np.array(prompts, dtype=object),
            "response": np.array(responses, dtype=object),
        },
    )


def _import_verl_quietly() -> None:
    """``import verl`` (which registers the rllm_* names) without its accelerator and engine warnings on a CPU machine."""
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import verl.trainer.ppo.ray_trainer  # noqa: F401
    finally:
        logging.disable(logging.NOTSET)


def compare_with_verl(norm_adv_by_std_in_grpo: bool = True) -> Comparison:
    """Run ``verl.trainer.ppo.ray_trainer.compute_advantage`` with each name of :data:`COMPARED` on one DataProto."""
    _import_verl_quietly()
    from omegaconf import OmegaConf
    from verl.trainer.ppo.ray_trainer import compute_advantage

    data = build_dataproto()
    mask = data.batch["response_mask"]
    advantages: dict[str, list[float]] = {}
    for name in (n for pair in COMPARED for n in pair):
        config = OmegaConf.create({"adv_estimator": name, "norm_adv_by_std_in_grpo": norm_adv_by_std_in_grpo})
        out = compute_advantage(data, adv_estimator=name, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, config=config)
        per_token = out.batch["advantages"]
        per_row = per_token[:, 0]
        if not torch.allclose(per_token, per_row.unsqueeze(-1) * mask):
            raise AssertionError(f"{name}: advantages are not one value per response broadcast over its tokens")
        advantages[name] = per_row.tolist()
    return Comparison(
        prompts=data.non_tensor_batch["prompt"].tolist(),
        responses=data.non_tensor_batch["response"].tolist(),
        lengths=mask.sum(-1).long().tolist(),
        rewards=data.batch["token_level_rewards"].sum(-1).tolist(),
        advantages=advantages,
    )
