"""TRL's paths of the conformance matrix (:mod:`rllm_plugins.testing.matrix`), contributed through ``rllm_plugins.conformance_paths``.

The functions ``RLLMGRPOTrainer`` calls on the gathered batch, without a model (a trainer step is too slow
for a matrix; the integration tests run real steps):

- ``trl_outcome``: :func:`rllm_trl.outcome.prepare_batch` and :func:`~rllm_trl.outcome.compute_advantages`
  on ``(N, 1)`` float32 rewards; TRL's groups are ``num_generations`` contiguous rows, so a sample's smaller
  groups are filled with unscorable rows (NaN: left out of every statistic);
- ``trl_turn``: step-level estimators on multi-turn completions, as the mixin does it
  (:func:`~rllm_trl.turns.row_turns`, :func:`~rllm_trl.turns.step_advantages`,
  :func:`~rllm_trl.turns.spread_local` to ``(B, T)`` float32): each step's environment tokens
  (``tool_mask`` 0), then its model tokens; per-turn rewards given as a rollout's ``turn_rewards`` key.
  Its rows without model tokens are completions whose ``tool_mask`` is 0 everywhere.

Options are checked at config time by ``RLLMGRPOConfig``. A call's advantage transforms are selected as
``RLLMGRPOConfig(advantage_transforms=[...])`` and handed to the estimator's run as the trainer hands them
(:func:`rllm_trl.transforms.sequence_transforms`): the twins ``trl_outcome+transforms`` and ``trl_turn+transforms``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from rllm_plugins.needs import needs_of
from rllm_plugins.state.store import EstimatorState
from rllm_plugins.testing.matrix import Call, Output, Path, Sample
from rllm_plugins.testing.matrix.paths import PROMPT
from rllm_plugins.testing.matrix.samples import MODEL_TOKEN
from rllm_trl.config import RLLMGRPOConfig, advantage_settings
from rllm_trl.outcome import compute_advantages, prepare_batch
from rllm_trl.trainer import check_trainer_setup
from rllm_trl.transforms import sequence_transforms
from rllm_trl.turns import TURN_REWARDS_KEY, local_turns, role_parts, row_turns, spread_local, step_advantages

__all__ = ["paths"]

FLOAT32_MAX = float(np.finfo(np.float32).max)


def _group_size(sample: Sample) -> int:
    return max((len(g) for g in sample.groups), default=1)


def _state(state: Mapping[str, Any] | None) -> EstimatorState:
    held = EstimatorState()
    if state is not None:
        held.load_state_dict(state)
    return held


def _transforms(call: Call) -> tuple[Any, ...]:
    """``call.transforms`` as a TRL user selects them: ``RLLMGRPOConfig(advantage_transforms=[...])``, resolved by the config
    (the matrix's are sequence-level; the token part needs a model's log-probs: the integration tests run it)."""
    if not call.transforms:
        return ()
    entries = [[name, dict(options)] for name, options in call.transforms]
    config = RLLMGRPOConfig(
        output_dir="unused", use_cpu=True, bf16=False, adv_estimator=call.name, adv_estimator_kwargs=dict(call.options), advantage_transforms=entries
    )
    return advantage_settings(config).transforms


def _outcome(call: Call, sample: Sample, state: Mapping[str, Any] | None) -> Output:
    G = _group_size(sample)  # noqa: N806 - TRL's num_generations
    rewards, lengths, real = [], [], []
    for group in sample.groups:
        for i in range(G):
            traj = group[i] if i < len(group) else None
            rewards.append(float("nan") if traj is None else traj.reward)
            lengths.append(1 if traj is None else sum(traj.lengths))
            real.append(traj is not None)
    task_ids = [f"task{g}" for g in range(len(sample.groups)) for _ in range(G)]
    batch = prepare_batch(torch.tensor(rewards, dtype=torch.float32)[:, None], torch.ones(1), G, lengths=lengths, task_ids=task_ids)
    held = _state(state)
    transforms, _ = sequence_transforms(_transforms(call))  # as RLLMGRPOTrainer hands them to compute_advantages
    advantages = compute_advantages(batch, call.name, estimator_kwargs=dict(call.options), state=held, transforms=transforms)
    return Output(np.asarray(advantages, dtype=np.float64)[np.array(real, dtype=bool)], held.state_dict())


def _completion(traj: Any) -> tuple[list[int], list[int], list[int]]:
    tokens, tool_mask, firsts = [], [], []
    for k, (length, anchor) in enumerate(zip(traj.lengths, traj.anchors, strict=True)):
        tokens += list(anchor)
        tool_mask += [0] * len(anchor)
        firsts.append(len(tokens))
        tokens += [MODEL_TOKEN + k] * length
        tool_mask += [1] * length
    return tokens, tool_mask, firsts


def _turns(call: Call, sample: Sample, idle_rows: bool) -> Output:
    """The turn path; ``idle_rows``: one completion per group whose tokens are all the environment's (appended to the group)."""
    from rllm_plugins.registry import get_estimator

    G = _group_size(sample) + int(idle_rows)  # noqa: N806 - TRL's num_generations
    rows: list[tuple[list[int], list[int]]] = []
    rewards: list[float] = []
    lengths: list[float] = []  # each completion's tokens, as TRL's batch carries them (a composite's length terms read them)
    overrides: list[dict[str, Any]] = []
    firsts: list[tuple[int, int]] = []
    idle: list[int] = []
    for group in sample.groups:
        for i in range(G):
            if i < len(group):
                tokens, tool_mask, starts = _completion(group[i])
                firsts += [(len(rows), t) for t in starts]
                rewards.append(group[i].reward)
                lengths.append(float(sum(group[i].lengths)))
                overrides.append({TURN_REWARDS_KEY: list(group[i].step_rewards)} if sample.level == "step" else {})
            elif idle_rows and i == G - 1:
                idle.append(len(rows))
                tokens, tool_mask = [3, 4], [0, 0]
                rewards.append(0.0)
                lengths.append(1.0)
                overrides.append({})
            else:  # a fill row: unscorable
                tokens, tool_mask = [MODEL_TOKEN], [1]
                rewards.append(float("nan"))
                lengths.append(1.0)
                overrides.append({})
            rows.append((tokens, tool_mask))
    width = max(len(t) for t, _ in rows)
    completion_ids = np.zeros((len(rows), width), dtype=np.int64)
    completion_mask = np.zeros((len(rows), width), dtype=np.int64)
    tool_mask = np.zeros((len(rows), width), dtype=np.int64)
    for b, (tokens, tools) in enumerate(rows):
        completion_ids[b, : len(tokens)] = tokens
        completion_mask[b, : len(tokens)] = 1
        tool_mask[b, : len(tools)] = tools
    prompt_ids = np.array([list(PROMPT)] * len(rows), dtype=np.int64)
    turns = local_turns(completion_mask, tool_mask)
    options = {**call.options, "norm_adv_by_std_in_grpo": True}
    needs = needs_of(get_estimator(call.name).spec, options)  # what the mixin hands it (a composite's terms: anchors, lengths, a state)
    described = row_turns(
        completion_ids, completion_mask, turns, overrides, with_anchors=needs.anchors, prompt_ids=prompt_ids, prompt_mask=np.ones_like(prompt_ids)
    )
    reward_array = torch.tensor(rewards, dtype=torch.float32).to(torch.float64).numpy()  # TRL's rewards are float32
    task_ids = np.array([f"task{g}" for g in range(len(sample.groups)) for _ in range(G)], dtype=object)
    transforms = None
    if call.transforms:  # as RLLMGRPOTrainer hands them over: one part per role of the batch
        batch = prepare_batch(torch.tensor(rewards, dtype=torch.float32)[:, None], torch.ones(1), G, task_ids=task_ids.tolist())
        transforms, _ = sequence_transforms(_transforms(call), role_parts(batch.roles, batch.group_roles))
    result = step_advantages(
        described,
        reward_array,
        G,
        call.name,
        options,
        lengths=np.array(lengths),
        task_ids=task_ids,
        state=EstimatorState() if needs.state else None,
        transforms=transforms,
    )
    tokens = spread_local(result, described, 0, turns).astype(np.float64)
    padding = tokens[idle].reshape(-1) if idle_rows else None
    return Output(np.array([tokens[b, t] for b, t in firsts]), None, padding)


def _turn(call: Call, sample: Sample, state: Mapping[str, Any] | None) -> Output:
    return _turns(call, sample, idle_rows=False)


def _turn_padded(call: Call, sample: Sample, _n: int) -> Output:
    return _turns(call, sample, idle_rows=True)


def trl_config_options(name: str, options: Mapping[str, Any]) -> None:
    """``RLLMGRPOConfig(adv_estimator=name, adv_estimator_kwargs=options)``: its config-time checks, and the trial run a
    trainer adds when it is built (:func:`rllm_trl.trainer.check_trainer_setup`)."""
    check_trainer_setup(RLLMGRPOConfig(output_dir="unused", use_cpu=True, bf16=False, adv_estimator=name, adv_estimator_kwargs=dict(options)))


def paths() -> list[Path]:
    """TRL's outcome path and turn path."""
    return [
        Path(
            "trl_outcome",
            "path",
            "trl",
            "rllm_trl compute_advantages on gathered (N, 1) float32 rewards",
            _outcome,
            levels=("outcome",),
            dtype="float32",
            max_reward=FLOAT32_MAX / 64,
            keeps_state=True,
            configure=trl_config_options,
            run_composite=_turn,
            takes_transforms=True,
        ),
        Path(
            "trl_turn",
            "path",
            "trl",
            "rllm_trl step_advantages and spread_local on multi-turn completions",
            _turn,
            levels=("step",),
            dtype="float32",
            max_reward=FLOAT32_MAX / 64,
            pad=_turn_padded,
            configure=trl_config_options,
            stateful=False,
            takes_transforms=True,
            critic_values="TRL's GRPOTrainer has no critic: RLLMGRPOConfig refuses a value-based estimator (integration_tests/trl/test_config.py)",
        ),
    ]
