"""verl's paths of the conformance matrix (:mod:`rllm_plugins.testing.matrix`), contributed through ``rllm_plugins.conformance_paths``.

- ``verl_legacy``: outcome-level ``rllm_<name>`` through verl's own ``ray_trainer.compute_advantage`` (the
  legacy trainer's call), on a CPU DataProto: one row per trajectory, its reward on its last model token;
- ``verl_step_bridge``: step-level ``rllm_<name>`` through the same function, one row per trajectory whose
  turns are its steps (each step's environment tokens, then its model tokens with ``response_mask`` 1; the
  step's reward on its last model token), anchors read from ``responses`` as in training.

Both read each step's advantage at its first model token, keep a stateful estimator's state where verl
keeps it (:func:`rllm_verl.compute.state.verl_estimator_state`), pad with rows whose ``response_mask``
is all 0 (uid ``pad_<i>``, as verl's v1 balancing pads a batch), select a call's advantage transforms as
``algorithm.rllm_advantage_transforms`` (their twins ``verl_legacy+transforms`` and ``verl_step_bridge+transforms``),
and check options at config time with
``rllm-plugins verl-check`` (:func:`rllm_verl.tools.check.verl_check`, verl's composed Hydra config; with
``critic.enable=true`` for a value-based estimator). For a value-based estimator (``turn_gae``) the batch
carries the critic's ``values`` (B, T) as the trainer holds them: each step's value on its model tokens,
0 elsewhere and on padding rows; its ``returns`` are read back at each step's first model token.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from rllm_plugins.testing.matrix import Call, Output, Path, Sample, Traj
from rllm_plugins.testing.matrix.estimators import GROUP_SIZES
from rllm_plugins.testing.matrix.paths import PROMPT
from rllm_plugins.testing.matrix.samples import MODEL_TOKEN

__all__ = ["critic_values", "encode", "paths", "transform_entries", "verl_compute"]

FLOAT32_MAX = float(np.finfo(np.float32).max)


def critic_values(traj: Traj) -> list[float]:
    """The critic's ``values`` of a trajectory's response tokens, one row as both trainers hold them: each step's value on its
    model tokens, 0 on the environment's before them."""
    values: list[float] = []
    for k, (length, anchor) in enumerate(zip(traj.lengths, traj.anchors, strict=True)):
        values += [0.0] * len(anchor) + [traj.values[k] if traj.values else 0.0] * length
    return values


def encode(sample: Sample, pad_rows: int = 0, values: bool = False) -> tuple[Any, list[int]]:
    """The sample as a DataProto (``responses``, ``response_mask``, ``token_level_rewards``, ``prompts``, with ``values`` the
    critic's ``values`` (:func:`critic_values`); ``uid``) and the position of every step's first model token, flat
    (``row * T + t``); ``pad_rows`` rows without model tokens appended (values 0)."""
    from verl import DataProto

    rows: list[tuple[list[int], list[int], list[float], list[float]]] = []
    firsts: list[tuple[int, int]] = []
    uids: list[str] = []
    for g, group in enumerate(sample.groups):
        for traj in group:
            tokens: list[int] = []
            mask: list[int] = []
            rewards: list[float] = []
            for k, (reward, length, anchor) in enumerate(zip(traj.step_rewards, traj.lengths, traj.anchors, strict=True)):
                tokens += list(anchor)
                mask += [0] * len(anchor)
                rewards += [0.0] * len(anchor)
                firsts.append((len(rows), len(tokens)))
                tokens += [MODEL_TOKEN + k] * length
                mask += [1] * length
                rewards += [0.0] * (length - 1) + [reward if sample.level == "step" else traj.reward]
            rows.append((tokens, mask, rewards, critic_values(traj)))
            uids.append(f"task{g}")
    width = max((len(r[0]) for r in rows), default=1)
    rows += [([0], [0], [0.0], [0.0])] * pad_rows
    uids += [f"pad_{i}" for i in range(pad_rows)]
    n = len(rows)
    responses = torch.zeros(n, width, dtype=torch.int64)
    mask = torch.zeros(n, width, dtype=torch.int64)
    rewards = torch.zeros(n, width, dtype=torch.float32)
    critic = torch.zeros(n, width, dtype=torch.float32)
    for b, (tok, m, r, v) in enumerate(rows):
        responses[b, : len(tok)] = torch.tensor(tok)
        mask[b, : len(m)] = torch.tensor(m)
        rewards[b, : len(r)] = torch.tensor(r, dtype=torch.float32)
        critic[b, : len(v)] = torch.tensor(v, dtype=torch.float32)
    prompts = torch.tensor([list(PROMPT)] * n, dtype=torch.int64)
    tensors = {"responses": responses, "response_mask": mask, "token_level_rewards": rewards, "prompts": prompts}
    if values:
        tensors["values"] = critic
    data = DataProto.from_dict(tensors=tensors, non_tensors={"uid": np.array(uids, dtype=object)})
    return data, [b * width + t for b, t in firsts]


def transform_entries(call: Call) -> list[dict[str, Any]]:
    """``call.transforms`` as a verl user writes them: ``+algorithm.rllm_advantage_transforms='[{name: clip, min: -0.5}, ...]'``."""
    return [{"name": name, **options} for name, options in call.transforms]


def _algorithm(call: Call, adv_estimator: str) -> Any:
    from omegaconf import OmegaConf

    section = {"adv_estimator": adv_estimator, "norm_adv_by_std_in_grpo": True, "gamma": 1.0, "lam": 1.0, "rllm_estimator_kwargs": dict(call.options)}
    if call.transforms:
        section["rllm_advantage_transforms"] = transform_entries(call)
    config = OmegaConf.create(section)
    OmegaConf.set_struct(config, True)
    return config


def verl_compute(sample: Sample, call: Call, adv_estimator: str, pad_rows: int = 0, values: bool = False) -> tuple[Any, list[int]]:
    """verl's ``ray_trainer.compute_advantage`` (the legacy trainer's call, with rLLM's extensions) on :func:`encode`'s batch:
    the DataProto it returns and every step's first model token; ``adv_estimator`` any name verl knows, verl's own too,
    ``call`` its options (``rllm_estimator_kwargs``) and transforms (``rllm_advantage_transforms``)."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
    from verl.trainer.ppo.ray_trainer import compute_advantage

    from rllm_verl.registration import register_estimators_into_verl

    if adv_estimator not in ADV_ESTIMATOR_REGISTRY:  # registered after verl was imported (user code, a plugin loaded late)
        register_estimators_into_verl()
    data, firsts = encode(sample, pad_rows, values=values)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*at most one turn", category=UserWarning)  # an outcome-level sample through the step bridge
        out = compute_advantage(
            data, adv_estimator=adv_estimator, gamma=1.0, lam=1.0, num_repeat=1, norm_adv_by_std_in_grpo=True, config=_algorithm(call, adv_estimator)
        )
    return out, firsts


def _compute(call: Call, sample: Sample, state: Mapping[str, Any] | None, pad_rows: int = 0) -> Output:
    from rllm_verl.compute.state import verl_estimator_state

    held = verl_estimator_state()
    if state is None:
        held.clear()
    else:
        held.load_state_dict(state)
    out, firsts = verl_compute(sample, call, f"rllm_{call.name}", pad_rows, values=call.needs_values)
    advantages = out.batch["advantages"].to(torch.float64)
    flat = advantages.reshape(-1).numpy()
    real = len({p // advantages.shape[1] for p in firsts})
    padding = advantages[real:].numpy().reshape(-1) if pad_rows else None
    returns = out.batch["returns"].to(torch.float64).reshape(-1).numpy()[firsts].copy() if call.needs_values else None
    return Output(flat[firsts].copy(), held.state_dict(), padding, returns)


def _run(call: Call, sample: Sample, state: Mapping[str, Any] | None) -> Output:
    return _compute(call, sample, state)


def _pad(call: Call, sample: Sample, n: int) -> Output:
    return _compute(call, sample, None, n)


def hydra_value(value: Any) -> str:
    """``value`` as a Hydra override value (a str quoted, so it stays a str; lists and dicts nested, as ``composite``'s terms)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"'{value}'"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return str(value)


def verl_check_options(name: str, options: Mapping[str, Any]) -> None:
    """``rllm-plugins verl-check`` on ``algorithm.adv_estimator=rllm_<name>`` with ``options`` (and ``critic.enable=true`` for a
    value-based estimator, as verl-check asks): ``ValueError`` with its errors when it fails."""
    from rllm_plugins.registry import get_estimator
    from rllm_verl.tools.check import verl_check

    overrides = [
        f"algorithm.adv_estimator=rllm_{name}",
        f"actor_rollout_ref.rollout.n={max(GROUP_SIZES)}",  # the samples' largest group
        *(["critic.enable=true"] if get_estimator(name).spec.needs_values else []),
        *(f"+algorithm.rllm_estimator_kwargs.{k}={hydra_value(v)}" for k, v in options.items()),
    ]
    report = verl_check(overrides)
    if not report.ok:
        raise ValueError("; ".join(report.errors))


def paths() -> list[Path]:
    """verl's paths: the legacy trainer's ``compute_advantage`` (outcome level) and the step bridge (step level)."""
    common: dict[str, Any] = {
        "dtype": "float32",
        "max_reward": FLOAT32_MAX / 64,
        "keeps_state": True,
        "pad": _pad,
        "configure": verl_check_options,
        "fast_configure": False,
        "critic_values": None,  # a value-based estimator's batch carries the critic's values
        "takes_transforms": True,  # +algorithm.rllm_advantage_transforms
    }
    return [
        Path(
            "verl_legacy",
            "path",
            "verl",
            "verl's ray_trainer.compute_advantage, rllm_<name>, one row per trajectory",
            _run,
            levels=("outcome",),
            run_composite=_run,
            **common,
        ),
        Path(
            "verl_step_bridge",
            "path",
            "verl",
            "verl's ray_trainer.compute_advantage, step-level rllm_<name>, one row per episode",
            _run,
            levels=("step",),
            **common,
        ),
    ]
