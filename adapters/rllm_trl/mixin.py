"""``RLLMAdvantageMixin``: rLLM advantages inside any ``GRPOTrainer`` (TRL has no advantage hook).

Two private TRL methods are overridden (their parameters checked by :mod:`rllm_trl.versions` when the trainer is built):

- ``_calculate_rewards`` returns the rewards of every process, ``(N_global, F)``; the mixin keeps
  them with the gathered completion lengths and roles;
- ``_generate_and_score_completions`` runs TRL's step, then recomputes the advantages on the
  global batch (groups of ``num_generations`` contiguous rows, ``num_generations_eval`` in eval,
  so groups straddling processes are whole), puts this process's rows into
  ``output["advantages"]`` and logs the rLLM metrics and the advantages used.

A stateful estimator (``rae``) keeps its state in ``estimator_state``, the same on every process, saved
with each checkpoint and restored on resume (``_save_checkpoint``, ``_load_optimizer_and_scheduler``;
:mod:`.state`); evaluation does not change it.

A step-level estimator (``gigpo``, ``step_reinforce``) gives one advantage per turn of a multi-turn
completion instead, and ``output["advantages"]`` becomes ``(B, T)``: see :mod:`.turns`.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
import torch
from accelerate.utils import gather_object
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer

from rllm_plugins.needs import needs_of
from rllm_plugins.options import state_options
from rllm_plugins.state.store import EstimatorState
from rllm_trl.config import AdvantageSettings, check_trainer_setup
from rllm_trl.outcome import RewardBatch, compute_advantages, compute_metrics, prepare_batch, role_name
from rllm_trl.rollout_keys import unread_step_keys
from rllm_trl.rollouts import checked_rollout_func
from rllm_trl.state import load_state, save_state, task_id
from rllm_trl.transforms import sequence_transforms, transform_tokens
from rllm_trl.turn_sources import multi_turn_path, single_turn_warning, turn_sources
from rllm_trl.turns import (
    ANCHOR_STATES_KEY,
    TURN_REWARDS_KEY,
    RowTurns,
    StepAdvantages,
    compute_step_metrics,
    local_turns,
    role_parts,
    row_turns,
    spread_local,
    step_advantages,
    without_rows,
)
from rllm_trl.versions import check_hooks, check_output, check_tool_paths, check_trainer_attributes

__all__ = ["RLLMAdvantageMixin"]

logger = logging.getLogger(__name__)


class RLLMAdvantageMixin:
    """Put before ``GRPOTrainer`` (or a subclass of it) in the bases; configure with ``RLLMGRPOConfig`` fields.

    The advantage fields of ``args`` are checked and resolved once, when the trainer is built
    (:func:`~rllm_trl.config.check_trainer_setup`; kept in ``advantage_settings``). A plain
    ``GRPOConfig`` gives TRL's own advantages (``trl_grpo`` following ``scale_rewards``). ``multi_objective_aggregation``
    is honoured for every estimator.
    After each generation, ``last_reward_batch`` and ``last_advantages`` hold the global batch
    and the ``(N_global,)`` advantages used (with a step-level estimator: each completion's mean
    turn advantage, and ``last_step_advantages`` the per-turn ones).
    """

    last_reward_batch: RewardBatch | None = None
    last_advantages: np.ndarray | None = None
    last_step_advantages: StepAdvantages | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        hooked = next((c for c in type(self).__mro__[1:] if "_calculate_rewards" in c.__dict__ and c is not RLLMAdvantageMixin), GRPOTrainer)
        where = type(self).__name__
        check_hooks(hooked, state=False, where=where)  # before TRL builds anything
        check_tool_paths(GRPOTrainer.__init__, args, kwargs, where=where)
        super().__init__(*args, **kwargs)
        check_trainer_attributes(self)
        self._rllm_pending: dict[str, Any] | None = None
        self._rllm_single_turn_noted = False
        self._rllm_turn_sources_logged = False
        self.advantage_settings: AdvantageSettings = check_trainer_setup(self.args, self.train_dataset, self.eval_dataset)
        settings = self.advantage_settings
        self._rllm_multi_turn_path = multi_turn_path(self)
        if getattr(self, "rollout_func", None) is not None:  # its keys and env_mask checked before TRL reads them
            anchors = needs_of(settings.selected[settings.estimator].spec, settings.estimator_kwargs).anchors
            unread = unread_step_keys(settings.estimator, step_level=settings.step_level, anchors=anchors)
            self.rollout_func = checked_rollout_func(self.rollout_func, step_level=settings.step_level, unread=unread)
        self._rllm_stateful = any(needs_of(estimator.spec, settings.estimator_kwargs).state for estimator in settings.selected.values())
        if self._rllm_stateful:  # its state is saved with each checkpoint
            check_hooks(hooked, where=where)
        self.estimator_state = EstimatorState()  # stateful estimators' state: the same on every process
        logger.info("%s: %s", type(self).__name__, self.advantage_settings.describe())

    def _calculate_rewards(
        self, inputs: list[dict[str, Any]], prompts: list[Any], completions: list[Any], completion_ids_list: list[list[int]]
    ) -> torch.Tensor:
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        device = rewards_per_func.device
        lengths = self.accelerator.gather(torch.tensor([len(ids) for ids in completion_ids_list], device=device))
        roles = None
        role_column = self.advantage_settings.role_column
        if role_column is not None:  # gathered before any check, so that every process raises the same error
            gathered = gather_object([(example[role_column], None) if role_column in example else (None, sorted(example)) for example in inputs])
            roles = []
            for row, (value, columns) in enumerate(gathered):
                if columns is not None:
                    raise ValueError(f"role_column={role_column!r}: completion {row} of the gathered batch has no such column (columns: {columns})")
                roles.append(role_name(value, f"role_column={role_column!r}, completion {row} of the gathered batch"))
        overrides = None
        if self.advantage_settings.step_level:  # the rollout_func's extra keys, merged into the inputs by TRL
            overrides = [{key: example[key] for key in (TURN_REWARDS_KEY, ANCHOR_STATES_KEY) if key in example} for example in inputs]
        task_ids = gather_object([task_id(p) for p in prompts]) if self._rllm_stateful else None
        self._rllm_pending = {"rewards_per_func": rewards_per_func, "lengths": lengths, "roles": roles, "overrides": overrides, "task_ids": task_ids}
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        check_output(output)
        pending, self._rllm_pending = self._rllm_pending, None
        if pending is None:
            raise RuntimeError("GRPOTrainer._generate_and_score_completions did not call _calculate_rewards; this TRL version is not supported")
        mode = "train" if self.model.training else "eval"
        settings = self.advantage_settings
        batch = prepare_batch(
            pending["rewards_per_func"],
            self.reward_weights,
            self.num_generations if mode == "train" else self.num_generations_eval,
            roles=pending["roles"],
            lengths=pending["lengths"],
            reward_names=self.reward_func_names,
            task_ids=pending["task_ids"],
        )
        if settings.step_level:
            self._step_level_advantages(output, batch, pending["overrides"], mode)
            return output
        sequence_part, token_part = sequence_transforms(settings.transforms)
        advantages = compute_advantages(
            batch,
            settings.estimator,
            estimator_map=settings.estimator_map,
            norm_adv_by_std_in_grpo=settings.norm_adv_by_std_in_grpo,
            estimator_kwargs=settings.estimator_kwargs,
            trl_settings=settings.trl_settings,
            aggregation=settings.aggregation,
            state=self.estimator_state if mode == "train" else self.estimator_state.preview(),  # eval: reads, commits nothing
            transforms=sequence_part,
        )
        transformed = dict(sequence_part.metrics) if sequence_part else {}
        local = output["advantages"]
        start = self.accelerator.process_index * local.shape[0]
        output["advantages"] = torch.as_tensor(advantages[start : start + local.shape[0]], dtype=torch.float32, device=local.device)
        if token_part:
            transformed.update(self._token_transforms(output, token_part, batch))
        self.last_reward_batch, self.last_advantages = batch, advantages
        self._log_rllm(mode, batch, advantages, {**compute_metrics(batch, advantages), **transformed})
        return output

    def _token_transforms(self, output: dict[str, Any], token_part: tuple[Any, ...], batch: RewardBatch) -> dict[str, float]:
        """The token-level part of ``advantage_transforms`` on this process's rows: ``output["advantages"]`` becomes ``(B, T)``."""
        local = output["advantages"]
        role = batch.roles[0] if len(batch.roles) == 1 else "all_roles"
        values, metrics = transform_tokens(local, output, token_part, role, self._sum_over_processes if self.accelerator.num_processes > 1 else None)
        output["advantages"] = torch.as_tensor(values, dtype=torch.float32, device=local.device)
        return metrics

    def _sum_over_processes(self, values: np.ndarray) -> np.ndarray:
        """``values`` ``(K,)`` summed over every process (accelerate's ``reduce``; each process calls it with its own)."""
        local = torch.as_tensor(np.asarray(values, dtype=np.float64), device=self.accelerator.device)
        return self.accelerator.reduce(local, reduction="sum").detach().cpu().numpy()

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            save_state(self.estimator_state, folder)

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            load_state(self.estimator_state, checkpoint, self._rllm_state_options())

    def _rllm_state_options(self) -> dict[str, dict[str, Any]]:
        """The options each configured stateful estimator runs with (recorded with its state)."""
        settings = self.advantage_settings
        options = {**settings.estimator_kwargs, "norm_adv_by_std_in_grpo": settings.norm_adv_by_std_in_grpo}
        specs = (estimator.spec for estimator in settings.selected.values())
        return {spec.name: state_options(spec, options) for spec in specs if needs_of(spec, settings.estimator_kwargs).state}

    def _step_level_advantages(self, output: dict[str, Any], batch: RewardBatch, overrides: list[dict[str, Any]] | None, mode: str) -> None:
        """Per-turn advantages of the gathered batch; this process's rows go into ``output["advantages"]``, ``(B, T)`` on multi-turn rows."""
        settings = self.advantage_settings
        completion_mask = output["completion_mask"].detach().cpu().numpy()
        tool_mask = output.get("tool_mask")
        turns = local_turns(completion_mask, None if tool_mask is None else tool_mask.detach().cpu().numpy())
        with_anchors = needs_of(settings.selected[settings.estimator].spec, settings.estimator_kwargs).anchors
        local = row_turns(
            output["completion_ids"].detach().cpu().numpy(),
            completion_mask,
            turns,
            overrides,
            with_anchors=with_anchors,
            prompt_ids=output["prompt_ids"].detach().cpu().numpy(),
            prompt_mask=output["prompt_mask"].detach().cpu().numpy(),
        )
        rows = RowTurns.concat(gather_object([local]))  # every process needs the turns (and anchor states) of the rows of its groups
        batch = without_rows(batch, rows.idle)  # no model token: nothing to train
        options = {**settings.estimator_kwargs, "norm_adv_by_std_in_grpo": settings.norm_adv_by_std_in_grpo}
        state = self.estimator_state if mode == "train" else EstimatorState.from_json(self.estimator_state.to_json())  # eval: a copy
        sequence_part, token_part = sequence_transforms(settings.transforms, role_parts(batch.roles, batch.group_roles))
        result = step_advantages(
            rows,
            batch.rewards,
            batch.num_generations,
            settings.estimator,
            options,
            lengths=batch.lengths,
            task_ids=batch.task_ids,
            state=state,
            roles=batch.roles,
            transforms=sequence_part,
        )
        transformed = dict(sequence_part.metrics) if sequence_part else {}
        device = output["advantages"].device
        start = self.accelerator.process_index * completion_mask.shape[0]
        if not self._rllm_turn_sources_logged and self.accelerator.is_main_process:
            self._rllm_turn_sources_logged = True
            logger.info(turn_sources(settings.estimator, rows, self._rllm_multi_turn_path, has_tool_mask=tool_mask is not None, needs_anchors=with_anchors))
        if tool_mask is None:  # single-turn rows: one turn each, one advantage per completion as TRL's (B,)
            if not self._rllm_single_turn_noted:
                self._rllm_single_turn_noted = True
                logger.warning(single_turn_warning(settings.estimator, self._rllm_multi_turn_path))
            values = result.values[result.offsets[start : start + completion_mask.shape[0]]]
            output["advantages"] = torch.as_tensor(values, dtype=torch.float32, device=device)
        else:
            output["advantages"] = torch.from_numpy(spread_local(result, rows, start, turns)).to(device)
        if token_part:
            transformed.update(self._token_transforms(output, token_part, batch))
        per_row = result.per_row_mean()
        self.last_reward_batch, self.last_advantages, self.last_step_advantages = batch, per_row, result
        self._log_rllm(mode, batch, per_row, {**compute_metrics(batch, per_row), **compute_step_metrics(batch, result), **transformed})

    def _log_rllm(self, mode: str, batch: RewardBatch, advantages: np.ndarray, metrics: dict[str, float] | None = None) -> None:
        """Add the rLLM metrics (``metrics``, else :func:`compute_metrics`) to TRL's and replace the advantages TRL just logged with ``advantages``."""
        for key, value in (metrics if metrics is not None else compute_metrics(batch, advantages)).items():
            self._metrics[mode][key].append(value)
        logged = self._logs["advantages"]
        for _ in range(min(len(logged), advantages.size)):
            logged.pop()
        logged.extend(advantages.tolist())
