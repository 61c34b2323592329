"""verl's path of ``rllm-plugins bench`` (:mod:`rllm_plugins.bench`), contributed through ``rllm_plugins.bench_paths``.

``verl``: verl's own ``ray_trainer.compute_advantage`` (the legacy trainer's call, with rLLM's extensions) on one
``DataProto`` of the bench's batch, built once on the device (``responses``, ``response_mask`` int64,
``token_level_rewards`` and the critic's ``values`` in the dtype asked for, ``prompts``, ``uid``): ``rllm_<name>`` for a
registered estimator (its options as ``algorithm.rllm_estimator_kwargs``), verl's own estimators by their names, the
advantage transforms as ``algorithm.rllm_advantage_transforms``. Each row's output is the ``(B, T)`` advantages the
call leaves in the batch; verl's own estimators are checked against the registered estimators that reproduce them
(:data:`OWN`), to float32's tolerance at least (they compute in float32 even on float64 rewards).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from rllm_plugins.bench.batch import BenchBatch
from rllm_plugins.bench.paths import BenchPath, Row, Setting

__all__ = ["OWN", "OWN_DEFAULT", "paths"]

OWN = {  # verl's estimator -> the registered estimator whose collector output it must equal
    "grpo": "verl_grpo",
    "grpo_vectorized": "verl_grpo",
    "rloo": "verl_rloo_vectorized",
    "rloo_vectorized": "verl_rloo_vectorized",
    "reinforce_plus_plus_baseline": "verl_reinforce_plus_plus_baseline",
    "opo": "opo",
    "gpg": "gpg",
}
OWN_DEFAULT = ("grpo_vectorized", "rloo_vectorized")


class _Prepared:
    def __init__(self, batch: BenchBatch, setting: Setting) -> None:
        from verl import DataProto

        dtype = getattr(torch, setting.dtype)
        device = torch.device(setting.device)
        tensors = {
            "responses": torch.from_numpy(batch.responses),
            "response_mask": torch.from_numpy(batch.response_mask),
            "token_level_rewards": torch.from_numpy(batch.token_level_rewards).to(dtype),
            "values": torch.from_numpy(batch.values).to(dtype),
            "prompts": torch.from_numpy(batch.prompts),
        }
        self.data = DataProto.from_dict(tensors={k: v.to(device) for k, v in tensors.items()}, non_tensors={"uid": batch.uid.copy()})
        self.sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None

    def row(self, name: str, options: Mapping[str, Any], transforms: Sequence[tuple[str, Mapping[str, Any]]], own: bool) -> Row:
        from omegaconf import OmegaConf
        from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
        from verl.trainer.ppo.ray_trainer import compute_advantage

        from .compute.state import verl_estimator_state
        from .context import quiet_provenance
        from .registration import register_estimators_into_verl

        adv_estimator = name if own else f"rllm_{name}"
        if adv_estimator not in ADV_ESTIMATOR_REGISTRY:  # registered after verl was imported (user code, a plugin loaded late)
            register_estimators_into_verl()
        section: dict[str, Any] = {"adv_estimator": adv_estimator, "norm_adv_by_std_in_grpo": True, "gamma": 1.0, "lam": 1.0}
        if not own:
            section["rllm_estimator_kwargs"] = dict(options)
        if transforms:
            section["rllm_advantage_transforms"] = [{"name": n, **o} for n, o in transforms]
        config = OmegaConf.create(section)
        data = self.data

        def call() -> object:  # the provenance line is the trainer's log: none here
            with quiet_provenance():
                return compute_advantage(data, adv_estimator=adv_estimator, gamma=1.0, lam=1.0, num_repeat=1, norm_adv_by_std_in_grpo=True, config=config)

        def output() -> np.ndarray:
            verl_estimator_state().clear()
            for key in ("advantages", "returns"):
                data.batch.pop(key, None)
            out = call()
            return out.batch["advantages"].to("cpu", torch.float64).numpy()

        def tensors() -> dict[str, Any]:
            batch = data.batch
            return {"rewards": batch["token_level_rewards"], "mask": batch["response_mask"], "output": batch["advantages"]}

        return Row(call, output, tensors)


def paths() -> list[BenchPath]:
    """verl's path of the bench: ``compute_advantage`` on a DataProto (CPU or CUDA tensors)."""
    return [
        BenchPath(
            "verl",
            "verl",
            "verl's ray_trainer.compute_advantage on one DataProto: rllm_<name>, or verl's own estimators",
            "tokens",
            _Prepared,
            own=OWN,
            own_default=OWN_DEFAULT,
            devices=("cpu", "cuda"),
            own_precision="float32",  # verl's own estimators compute in float32 whatever the rewards' dtype (their eps, their std)
        )
    ]
