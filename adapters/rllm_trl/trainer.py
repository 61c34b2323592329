"""``RLLMGRPOTrainer``: TRL's ``GRPOTrainer`` with advantages from an rLLM estimator, and ``RLLMAdvantageMixin``, its part.

``RLLMAdvantageMixin``: rLLM advantages inside any ``GRPOTrainer`` (TRL has no advantage hook).

Two private TRL methods are overridden (their parameters checked by :mod:`rllm_trl.versions` when the trainer is built):

- ``_calculate_rewards`` returns the rewards of every process, ``(N_global, F)``; the mixin keeps
  them with the gathered completion lengths and roles;
- ``_generate_and_score_completions`` runs TRL's step, then recomputes the advantages on the
  global batch (groups of ``num_generations`` contiguous rows, ``num_generations_eval`` in eval,
  so groups straddling processes are whole), puts this process's rows into
  ``output["advantages"]`` and logs the rLLM metrics and the advantages used.

Which code computes the advantages (:meth:`AdvantageSettings.provenance`, one line by
:func:`rllm_plugins.provenance.provenance_line`) is said once per run and again when it changes: printed by the main
process at the first advantage step (``rllm-plugins: advantages computed by ...``), and as ``rllm_provenance`` in the
next logs (``trainer_state.json``'s ``log_history``, the console's log line, the trackers).

A stateful estimator (``rae``) keeps its state in ``estimator_state``, the same on every process, saved
with each checkpoint and restored on resume (``_save_checkpoint``, ``_load_optimizer_and_scheduler``;
below); evaluation does not change it.

A step-level estimator (``gigpo``, ``step_reinforce``) gives one advantage per turn of a multi-turn
completion instead, and ``output["advantages"]`` becomes ``(B, T)``: see :mod:`rllm_trl.turns`.

The settings are resolved once per trainer (:func:`check_trainer_setup`, kept in ``advantage_settings``): the
config's resolution (:func:`rllm_trl.config.advantage_settings`), each estimator's trial run on tiny groups (a broken
plugin fails when the trainer is built, not at step 1) and the dataset checks. Each step reads those objects: no
estimator or transform is looked up by name.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import datasets
import numpy as np
import torch
from accelerate.utils import gather_object
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer

from rllm_plugins.needs import needs_of
from rllm_plugins.options import state_options
from rllm_plugins.provenance import provenance_line
from rllm_plugins.registry import state_schemas
from rllm_plugins.shaping.stage import Shapers
from rllm_plugins.state.store import EstimatorState, accepted_from_env
from rllm_plugins.trial import trial_run
from rllm_trl.config import SHAPERS_WHERE, AdvantageSettings, advantage_settings, role_name
from rllm_trl.outcome import RewardBatch, compute_advantages, compute_metrics, prepare_batch
from rllm_trl.rollouts import checked_rollout_func, unread_step_keys
from rllm_trl.transforms import sequence_transforms, transform_tokens
from rllm_trl.turns import (
    ANCHOR_STATES_KEY,
    TURN_REWARDS_KEY,
    RowTurns,
    StepAdvantages,
    compute_step_metrics,
    local_turns,
    multi_turn_path,
    role_parts,
    row_turns,
    single_turn_warning,
    spread_local,
    step_advantages,
    turn_sources,
    without_rows,
)
from rllm_trl.versions import check_hooks, check_output, check_tool_paths, check_trainer_attributes

__all__ = ["PROVENANCE_KEY", "STATE_FILE", "RLLMAdvantageMixin", "RLLMGRPOTrainer", "check_trainer_setup", "load_state", "save_state", "task_id"]

logger = logging.getLogger(__name__)

PROVENANCE_KEY = "rllm_provenance"  # the logs' key of the provenance line (a string among TRL's numbers)
PROVENANCE_PREFIX = "rllm-plugins: advantages computed by "


# ---------------------------------------------------------------- the settings, resolved once per trainer


def _named_datasets(train_dataset: Any, eval_dataset: Any) -> Iterator[tuple[str, Any]]:
    if train_dataset is not None:
        yield "train_dataset", train_dataset
    if isinstance(eval_dataset, dict):
        for key, dataset in eval_dataset.items():
            yield f"eval_dataset[{key!r}]", dataset
    elif eval_dataset is not None:
        yield "eval_dataset", eval_dataset


def check_trainer_setup(args: Any, train_dataset: Any = None, eval_dataset: Any = None) -> AdvantageSettings:
    """The settings a trainer runs with, resolved once: :func:`~rllm_trl.config.advantage_settings` (an
    ``RLLMGRPOConfig``'s own, resolved when it was built), each estimator's trial run on tiny groups (a broken plugin
    fails here, not at step 1), and what would otherwise fail at the first step: ``role_column`` missing from a dataset
    (or dropped by ``remove_unused_columns``) and role values that are no role names (``None``, ``""``, holding ``":"``).
    Datasets without known columns are checked per batch.
    """
    settings = advantage_settings(args)
    named = [("adv_estimator", settings.estimator), *((f"adv_estimator_map[{role!r}]", n) for role, n in settings.estimator_map.items())]
    norm = settings.norm_adv_by_std_in_grpo
    for where, name in dict.fromkeys(named):
        trial_run(name, settings.selected[name], settings.estimator_kwargs, norm_adv_by_std_in_grpo=norm, where=f"RLLMGRPOConfig.{where}")
    column = settings.role_column
    if column is None:
        return settings
    if getattr(args, "remove_unused_columns", False):
        raise ValueError(f"remove_unused_columns=True drops role_column={column!r} before the rewards are computed; set remove_unused_columns=False")
    for where, dataset in _named_datasets(train_dataset, eval_dataset):
        columns = getattr(dataset, "column_names", None)
        if columns is None:
            continue
        if column not in columns:
            raise ValueError(
                f"role_column={column!r} is not a column of {where} (columns: {sorted(columns)}); "
                "add it, or set role_column to the column naming each prompt's role"
            )
        if isinstance(dataset, datasets.Dataset):
            if not isinstance(dataset.features[column], datasets.Value):
                raise ValueError(f"role_column={column!r} of {where} holds {dataset.features[column]}; a role is one name per prompt (str)")
            roles = sorted({role_name(value, f"role_column={column!r} of {where}") for value in dataset.unique(column)})
            _check_one_role_for_a_step_level_state(settings, where, roles)
    return settings


def _check_one_role_for_a_step_level_state(settings: AdvantageSettings, where: str, roles: list[str]) -> None:
    """The step-level path computes a batch's roles in one call, and a state is kept per role: a step-level estimator that keeps a
    state (a composite with a ``rae`` term) takes one role; refuse a dataset of several now rather than at the first step."""
    if len(roles) < 2 or not settings.step_level:
        return
    if needs_of(settings.selected[settings.estimator].spec, settings.estimator_kwargs).state:
        raise ValueError(
            f"adv_estimator={settings.estimator!r} keeps a state per role, and role_column={settings.role_column!r} of {where} holds the roles "
            f"{roles}, which the step-level path computes in one call: drop role_column, or the stateful term"
        )


# ---------------------------------------------------------------- estimator state in checkpoints
#
# The state of stateful estimators (``rae``'s running baselines) in TRL: task ids, and saving it with checkpoints.
#
# Every process computes the advantages of the gathered batch, so every process holds the same state
# (``RLLMAdvantageMixin.estimator_state``), updated by training generations only (an evaluation runs on a
# copy). It is saved as ``checkpoint-<step>/rllm_estimator_state.json`` by the main process and read back
# by every process on ``trainer.train(resume_from_checkpoint=...)``, the way TRL saves its own adaptive
# entropy state (after ``_save_checkpoint``; in ``_load_optimizer_and_scheduler``).
#
# On resume the file's options are compared with the trainer's (``ValueError`` naming the option and
# both values, unless ``RLLM_PLUGINS_ACCEPT_CHANGED_STATE_OPTIONS`` names it), and a checkpoint without
# the file, when a stateful estimator is configured, gives a ``RuntimeWarning`` naming the path: its
# baselines start from 0.

STATE_FILE = "rllm_estimator_state.json"


def task_id(prompt: Any) -> str:
    """A stable task id of a prompt: the text itself, or the JSON of a conversation (a list of messages)."""
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str)


def save_state(state: EstimatorState, checkpoint: str) -> str | None:
    """Write ``state`` into the checkpoint folder (when it holds anything); returns the file written."""
    if not state:
        return None
    os.makedirs(checkpoint, exist_ok=True)
    path = os.path.join(checkpoint, STATE_FILE)
    with open(path, "w", encoding="utf-8") as f:
        f.write(state.to_json())
    return path


def load_state(state: EstimatorState, checkpoint: str, options: Mapping[str, Mapping[str, Any]] | None = None) -> bool:
    """Replace ``state`` by the one saved in ``checkpoint``; False (``state`` cleared) when there is none.

    ``options`` (stateful estimator name -> the options the trainer runs with) are compared with the
    file's; when given and the file is missing, a ``RuntimeWarning`` names the path.
    """
    path = os.path.join(checkpoint, STATE_FILE)
    if not os.path.exists(path):
        state.clear()
        if options:
            warnings.warn(
                f"rllm-plugins: resuming from {checkpoint}, which has no {STATE_FILE} (expected at {path}); "
                f"the running baselines of {sorted(options)} start from 0",
                RuntimeWarning,
                stacklevel=2,
            )
        return False
    with open(path, encoding="utf-8") as f:
        saved = json.load(f)
    names = saved.get("estimators", {}) if isinstance(saved, dict) and isinstance(saved.get("estimators"), dict) else {}
    state.load_state_dict(saved, options=options, schemas=state_schemas(names), accept_changed_options=accepted_from_env(), source=path)
    return True


# ---------------------------------------------------------------- the trainer


class RLLMAdvantageMixin:
    """Put before ``GRPOTrainer`` (or a subclass of it) in the bases; configure with ``RLLMGRPOConfig`` fields.

    The advantage fields of ``args`` are checked and resolved once, when the trainer is built
    (:func:`check_trainer_setup`; kept in ``advantage_settings``). A plain
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
        self.advantage_settings: AdvantageSettings = check_trainer_setup(self.args, self.train_dataset, self.eval_dataset)  # once
        settings = self.advantage_settings
        self._rllm_multi_turn_path = multi_turn_path(self)
        self._rllm_with_anchors = needs_of(settings.selected[settings.estimator].spec, settings.estimator_kwargs).anchors
        if getattr(self, "rollout_func", None) is not None:  # its keys and env_mask checked before TRL reads them
            unread = unread_step_keys(settings.estimator, step_level=settings.step_level, anchors=self._rllm_with_anchors)
            self.rollout_func = checked_rollout_func(self.rollout_func, step_level=settings.step_level, unread=unread)
        self._rllm_stateful = any(needs_of(estimator.spec, settings.estimator_kwargs).state for estimator in settings.selected.values())
        if self._rllm_stateful:  # its state is saved with each checkpoint
            check_hooks(hooked, where=where)
        self.estimator_state = EstimatorState()  # stateful estimators' state: the same on every process
        self._rllm_provenance_said: str | None = None  # the provenance line last printed, and last put in the logs
        self._rllm_provenance_logged: str | None = None
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
        self._rllm_say_provenance()
        batch = prepare_batch(
            pending["rewards_per_func"],
            self.reward_weights,
            self.num_generations if mode == "train" else self.num_generations_eval,
            roles=pending["roles"],
            lengths=pending["lengths"],
            reward_names=self.reward_func_names,
            task_ids=pending["task_ids"],
        )
        shapers = self._rllm_shapers(output, pending["lengths"])
        if settings.step_level:
            self._step_level_advantages(output, batch, pending["overrides"], mode, shapers)
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
            selected=settings.selected,
            shapers=shapers,
        )
        transformed = {**(shapers.metrics if shapers else {}), **(sequence_part.metrics if sequence_part else {})}
        local = output["advantages"]
        start = self.accelerator.process_index * local.shape[0]
        output["advantages"] = torch.as_tensor(advantages[start : start + local.shape[0]], dtype=torch.float32, device=local.device)
        if token_part:
            transformed.update(self._token_transforms(output, token_part, batch))
        self.last_reward_batch, self.last_advantages = batch, advantages
        self._log_rllm(mode, batch, advantages, {**compute_metrics(batch, advantages), **transformed})
        return output

    def provenance_line(self) -> str:
        """Which code computes this trainer's advantages, as one line (:meth:`AdvantageSettings.provenance`)."""
        return provenance_line(self.advantage_settings.provenance())

    def _rllm_say_provenance(self) -> None:
        """At an advantage step: the main process prints the provenance line when it is new in this run (first step, a change)."""
        line = self.provenance_line()
        if line != self._rllm_provenance_said:
            self._rllm_provenance_said = line
            if self.accelerator.is_main_process:
                print(f"{PROVENANCE_PREFIX}{line}", file=sys.stderr, flush=True)  # stderr: the script's own output stays its own

    def log(self, logs: dict[str, Any], start_time: float | None = None) -> None:
        """TRL's ``log``, with ``rllm_provenance`` (the provenance line) in the first logs of a run and in the first after it
        changed: ``trainer_state.json``'s ``log_history`` keeps it, the console's log line and the trackers show it."""
        line = self.provenance_line()
        if line != self._rllm_provenance_logged:
            self._rllm_provenance_logged = line
            logs = {**logs, PROVENANCE_KEY: line}
        super().log(logs, start_time)  # type: ignore[misc]

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
        options = settings.options
        specs = (estimator.spec for estimator in settings.selected.values())
        return {spec.name: state_options(spec, options) for spec in specs if needs_of(spec, settings.estimator_kwargs).state}

    def _rllm_shapers(self, output: dict[str, Any], lengths: torch.Tensor) -> Shapers | None:
        """``reward_shapers`` with the gathered completions' context: model tokens, prompt tokens, tool tokens (where TRL's tool
        loop or a rollout_func's env_mask marks the environment's: ``tool_mask``) and turns (runs of model tokens). A completion's
        tokens are its ``lengths`` (the gathered ids' lengths), not ``completion_mask``'s: with ``mask_truncated_completions``
        TRL zeroes a truncated completion's mask (and ``tool_mask``), and an overlong penalty must still see its tokens, all
        counted as the model's then. One gather of (B, 3) counts, only when shapers are configured."""
        selected = self.advantage_settings.shapers
        if not selected:
            return None
        completion = output["completion_mask"].detach()
        start = self.accelerator.process_index * completion.shape[0]
        count = lengths[start : start + completion.shape[0]].to(completion.device)
        full = (torch.arange(completion.shape[1], device=completion.device)[None, :] < count[:, None]).to(completion.dtype)
        tool = output.get("tool_mask")
        masked = (completion.sum(-1) == 0)[:, None]  # truncated and masked by TRL: its tool_mask was zeroed too
        model = full if tool is None else torch.where(masked, full, full * tool.detach())
        ones = model != 0
        runs = ones[:, :1].sum(-1) + (ones[:, 1:] & ~ones[:, :-1]).sum(-1)
        local = torch.stack([output["prompt_mask"].detach().sum(-1), (full - model).sum(-1), runs], dim=1).to(torch.float64)
        counts = self.accelerator.gather(local).cpu().numpy()
        tools = counts[:, 1]
        context = {"lengths": lengths.cpu().numpy().astype(np.float64) - tools, "input_lengths": counts[:, 0], "tool_lengths": tools, "turns": counts[:, 2]}
        return Shapers(selected, SHAPERS_WHERE, context)

    def _step_level_advantages(
        self, output: dict[str, Any], batch: RewardBatch, overrides: list[dict[str, Any]] | None, mode: str, shapers: Shapers | None = None
    ) -> None:
        """Per-turn advantages of the gathered batch; this process's rows go into ``output["advantages"]``, ``(B, T)`` on multi-turn rows."""
        settings = self.advantage_settings
        completion_mask = output["completion_mask"].detach().cpu().numpy()
        tool_mask = output.get("tool_mask")
        turns = local_turns(completion_mask, None if tool_mask is None else tool_mask.detach().cpu().numpy())
        with_anchors = self._rllm_with_anchors
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
        state = self.estimator_state if mode == "train" else EstimatorState.from_json(self.estimator_state.to_json())  # eval: a copy
        sequence_part, token_part = sequence_transforms(settings.transforms, role_parts(batch.roles, batch.group_roles))
        result = step_advantages(
            rows,
            batch.rewards,
            batch.num_generations,
            settings.estimator,
            settings.options,
            lengths=batch.lengths,
            task_ids=batch.task_ids,
            state=state,
            roles=batch.roles,
            transforms=sequence_part,
            estimator=settings.selected[settings.estimator],
            shapers=shapers,
        )
        transformed = {**(shapers.metrics if shapers else {}), **(sequence_part.metrics if sequence_part else {})}
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


class RLLMGRPOTrainer(RLLMAdvantageMixin, GRPOTrainer):
    """``GRPOTrainer`` whose advantages come from ``args.adv_estimator`` (use with ``RLLMGRPOConfig``)."""
