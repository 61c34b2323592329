"""Fail fast: compose verl's Hydra ``ppo_trainer`` config and check ``algorithm.adv_estimator`` before launch.

verl reports an unknown estimator only at the first advantage computation, after the workers
started and the first rollout ran. :func:`verl_check` composes the same config verl's
``main_ppo`` would (same overrides), looks the estimator up in verl's registry (where the
``rllm_*`` names are), and for an ``rllm_*`` name checks that verl will load our ``verl.plugins`` entry point (named
``rllm_plugins``; ``VERL_USE_EXTERNAL_PLUGINS`` may exclude it), checks the estimator options (also
against the group size ``actor_rollout_ref.rollout.n``) and runs it on toy batches with groups of
several sizes (1, 2, 3, 4, 8 and ``rollout.n``, as many as the options allow): groups of one alone
cannot show an estimator that returns one flat list instead of one array per group. The trial goes
through the function the configured trainer calls (``ray_trainer.compute_advantage`` on the legacy
trainer, ``compute_advantage_for_multi_trajectories`` inside a v1 advantage step, with the rows' token ids
served as TransferQueue would), so an extension that is off fails here as it would in training. For a
step-level estimator the report says where anchor states come from, the discount and step weight it
resolved (and from where), and warns when the agent loop gives every row one turn. The agent-loop configuration
is resolved as verl resolves it (:mod:`rllm_verl.tools.agent_loop`): its file, the default loop's name and class. The report names who provides the
estimator (verl itself, rllm-plugins, a plugin), the group sizes tried, and whether the three verl
extensions (sessions, reward keys, v1 batch; see :mod:`rllm_verl.extension`) are active.
``rllm-plugins verl-check OVERRIDES...`` calls :func:`main`, which prints the verdict first and keeps
what verl prints while it is imported out of the way (``--verbose`` shows it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from rllm_verl.tools.loading import ENTRY_POINT_NAME, entry_point_policy_error, external_modules_error
from rllm_verl.tools.resolved import table_lines
from rllm_verl.versions import PLUGIN_MODULE

__all__ = ["ENTRY_POINT_NAME", "VerlCheckReport", "entry_point_policy_error", "external_modules_error", "main", "registration_mechanism", "verl_check"]

TRIAL_GROUP_SIZES = (1, 2, 3, 4, 8)  # tried whatever rollout.n says, with rollout.n itself


def extension_status_of(name: str) -> str:
    """Whether the verl extension ``name`` (``sessions``, ``reward_keys``, ``v1_batch``, ``sync_trainer_refusal``) is active;
    imports the verl module it extends (``absent: ...`` when this verl release has none)."""
    import importlib

    from rllm_verl.extension import extension_status, install
    from rllm_verl.patches.legacy import REWARD_KEYS
    from rllm_verl.patches.sessions import SESSIONS
    from rllm_verl.patches.sync_trainer import SYNC_TRAINER
    from rllm_verl.patches.v1 import V1_BATCH

    extension = {e.name: e for e in (SESSIONS, REWARD_KEYS, V1_BATCH, SYNC_TRAINER)}[name]
    status = install(extension)
    if status.startswith("absent"):  # this verl release has no such module (rllm_verl.versions)
        return status
    try:
        importlib.import_module(extension.module)  # importing it applies a pending extension
    except Exception as error:
        return f"not applied: {extension.module} cannot be imported ({type(error).__name__}: {error})"
    return extension_status().get(extension.name, "not installed")


def _checkpoint_status() -> str:
    from rllm_verl.patches.checkpoints import checkpoint_status

    return checkpoint_status()


@dataclass
class VerlCheckReport:
    """Outcome of :func:`verl_check`: whether ``adv_estimator`` resolves, the ``rllm_*`` names verl knows, each extension's status."""

    ok: bool
    adv_estimator: str | None
    config_name: str
    rllm_names: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    provider: str | None = None
    trial_group_sizes: list[int] = field(default_factory=list)
    trial_note: str = ""
    step_level: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    resolved: list[list[str]] = field(default_factory=list)  # (what, value, from): the estimator's options, verl, trainer path, agent loop
    session_extension: str = field(default_factory=lambda: extension_status_of("sessions"))
    reward_key_extension: str = field(default_factory=lambda: extension_status_of("reward_keys"))
    v1_batch_extension: str = field(default_factory=lambda: extension_status_of("v1_batch"))
    estimator_state: str = field(default_factory=lambda: _checkpoint_status())
    registration: str = field(default_factory=lambda: registration_mechanism())
    sync_trainer: str = field(default_factory=lambda: extension_status_of("sync_trainer_refusal"))
    provenance: str = ""  # which code computes the advantages (rllm_plugins.provenance), as the run prints it
    untested: str | None = field(default_factory=lambda: _untested_verl())  # a verl newer than the matrix tested (rllm_verl.versions)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def __str__(self) -> str:
        head = f"verl config {self.config_name!r}: algorithm.adv_estimator={self.adv_estimator!r}"
        lines = [f"{head}: {'OK' if self.ok else 'FAILED'}", *(f"  error: {e}" for e in self.errors)]
        if self.provider:
            lines.append(f"  provided by: {self.provider}")
        lines.extend(f"  {line}" for line in table_lines(self.resolved))
        lines.extend(f"  advantages computed by: {line}" for line in [self.provenance] if line)
        if self.trial_group_sizes:
            lines.append(f"  trial run: two groups of each size {', '.join(map(str, self.trial_group_sizes))}{self.trial_note}")
        lines.extend(f"  {line}" for line in self.step_level)
        lines.extend(f"  warning: {w}" for w in self.warnings)
        lines.extend(f"  untested verl: {line}" for line in [self.untested] if line)
        lines.append(f"  rllm_* estimators in verl: {', '.join(self.rllm_names) or '(none)'}")
        lines.append(f"  registration in every process that imports verl: {self.registration}")
        lines.append(f"  session extension (rllm_* over v1 multi-output sessions): {self.session_extension}")
        lines.append(f"  reward-key extension (algorithm.gdpo_reward_keys for rllm_* in ray_trainer.compute_advantage): {self.reward_key_extension}")
        lines.append(f"  v1-batch extension (token ids and reward keys of v1 rows from TransferQueue): {self.v1_batch_extension}")
        lines.append(f"  stateful estimators' state (rllm_rae's baselines): {self.estimator_state}")
        lines.append(f"  verl 0.8's TransferQueue trainer main_ppo_sync (rllm_* names refused there): {self.sync_trainer}")
        return "\n".join(lines)


def _untested_verl() -> str | None:
    """:attr:`rllm_verl.versions.VerlFeatures.untested` of the installed verl (None when tested, or when its version cannot be read)."""
    from rllm_verl.versions import verl_features

    try:
        return verl_features().untested
    except Exception:  # verl not installed: the report says why elsewhere
        return None


def _compose(overrides: Sequence[str], config_name: str, config_dir: str | None):
    import verl
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    directory = config_dir or os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=os.path.abspath(directory), version_base=None):
        return compose(config_name=config_name, overrides=list(overrides))


def registration_mechanism(environ: Mapping[str, str] | None = None) -> str:
    """Which mechanism registers the ``rllm_*`` names in each process that imports the installed verl, and whether it is in place."""
    from rllm_verl.versions import EXTERNAL_MODULES_ENV, MODULES_LINE, verl_features

    features = verl_features()
    error = entry_point_policy_error(environ)
    if features.entry_points:
        how = f"verl {features.version} loads the verl.plugins entry point {ENTRY_POINT_NAME!r} ({PLUGIN_MODULE}) in import verl"
    else:
        how = f"verl {features.version} has no verl.plugins entry points: import verl imports the modules named in {EXTERNAL_MODULES_ENV} ({MODULES_LINE})"
    return f"{how}: {'NOT in place' if error else 'in place'}"


def _dry_run(name: str, algorithm: object, group_size: int, use_v1: bool, reference: bool) -> None:
    """Run ``name`` with the real options on a toy batch (two groups of ``group_size``, uneven lengths, two turns in most rows,
    what verl holds at that point: ``token_level_scores``, ``old_log_probs``, and ``ref_log_prob`` when ``reference``) through
    the function the configured trainer calls: ``ray_trainer.compute_advantage`` (legacy) or, in a v1 advantage step whose rows
    are served from memory as TransferQueue would serve them, ``compute_advantage_for_multi_trajectories``."""
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    from rllm_verl.context import V1Batch, serving
    from rllm_verl.extension import extension_status
    from rllm_verl.patches.v1 import V1_BATCH

    rows = 2 * group_size
    rewards = torch.zeros(rows, 5)
    rewards[::2, 4] = 1.0  # a success and a failure in each group (sizes > 1)
    rewards[1::4, 1] = 0.5
    mask = torch.tensor([[1, 0, 1, 1, 0], [1, 1, 0, 0, 1], [1, 0, 0, 0, 0], [1, 1, 0, 1, 0]]).repeat(group_size, 1)[:rows]
    responses = torch.arange(rows * 5).reshape(rows, 5) % 3
    prompts = torch.tensor([[9, 9]] * rows)
    values = torch.linspace(-0.5, 0.5, rows * 5).reshape(rows, 5)  # the critic's, as the trainer holds them when critic.enable=true
    log_probs = {"old_log_probs": -torch.linspace(0.1, 2.0, rows * 5).reshape(rows, 5)}  # verl computes them before the advantage
    if reference:  # and ref_log_prob only with a reference policy
        log_probs["ref_log_prob"] = log_probs["old_log_probs"] - torch.linspace(-0.2, 0.3, rows * 5).reshape(rows, 5)
    task_scores = rewards.clone()  # token_level_scores; with use_kl_in_reward verl subtracts a KL penalty from them into the rewards
    if OmegaConf.select(algorithm, "use_kl_in_reward", default=False):  # type: ignore[arg-type]
        rewards = task_scores - 0.01 * (log_probs["old_log_probs"] - log_probs["ref_log_prob"]) * mask
    index = np.array(["p"] * group_size + ["q"] * group_size, dtype=object)
    keys = OmegaConf.select(algorithm, "gdpo_reward_keys", default=None)  # type: ignore[arg-type]
    scores = [{str(k): [1.0, 0.0, 0.5, None][i % 4] for k in keys} for i in range(rows)] if keys and not isinstance(keys, str) else None
    kwargs = {
        "gamma": OmegaConf.select(algorithm, "gamma", default=1.0),  # type: ignore[arg-type]
        "lam": OmegaConf.select(algorithm, "lam", default=1.0),  # type: ignore[arg-type]
        "num_repeat": group_size,
        "norm_adv_by_std_in_grpo": OmegaConf.select(algorithm, "norm_adv_by_std_in_grpo", default=True),  # type: ignore[arg-type]
        "config": algorithm,
    }
    if not use_v1:  # the legacy trainer's DataProto holds the token ids, the attention mask and the reward keys
        non_tensors = {"uid": index, **({k: np.array([s[k] for s in scores], dtype=object) for k in scores[0]} if scores else {})}
        tensors = {"token_level_rewards": rewards, "token_level_scores": task_scores, "response_mask": mask, "responses": responses, "prompts": prompts}
        tensors["attention_mask"] = torch.cat([torch.ones_like(prompts), torch.ones_like(mask)], dim=1)  # tool tokens between the turns
        tensors.update(values=values, **log_probs)
        compute_advantage(DataProto.from_dict(tensors=tensors, non_tensors=non_tensors), adv_estimator=name, **kwargs)
        return
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories  # only when the release has the v1 trainer

    tensors = {"token_level_rewards": rewards, "token_level_scores": task_scores, "response_mask": mask, "values": values, **log_probs}  # as v1 holds them
    data = DataProto.from_dict(tensors=tensors, non_tensors={"uid": index})
    row_keys = [f"{uid}_{row}_0" for row, uid in enumerate(index.tolist())]
    if not extension_status().get(V1_BATCH.name, "").startswith("active"):  # as in training: nothing serves the rows
        compute_advantage_for_multi_trajectories(data, row_keys, adv_estimator=name, **kwargs)
        return
    served = {
        "uid": list(index),
        "prompts": list(prompts),
        "responses": list(responses),
        "extra_fields": [{"reward_extra_info": s} if s else {} for s in (scores or [None] * rows)],
    }
    with serving(V1Batch(row_keys, lambda fields: {f: served[f] for f in fields})):
        compute_advantage_for_multi_trajectories(data, row_keys, adv_estimator=name, **kwargs)


def _step_level_lines(estimator: object, options: Mapping[str, object], config: object, use_v1: bool) -> tuple[list[str], list[str]]:
    """For a step-level estimator: where anchors come from and the discount and step weight it resolves; and warnings."""
    import inspect

    from omegaconf import OmegaConf

    from rllm_plugins.needs import needs_of
    from rllm_verl.compute.steps import resolve_gamma
    from rllm_verl.tools.agent_loop import agent_loop_turn_warnings

    spec = estimator.spec  # type: ignore[attr-defined]
    if spec.level != "step":
        return [], []
    fn = spec.batched if spec.batched is not None else spec.fn
    defaults = {p.name: p.default for p in inspect.signature(fn).parameters.values() if p.default is not inspect.Parameter.empty}
    algorithm = OmegaConf.select(config, "algorithm")  # type: ignore[arg-type]
    resolved = []
    if "gamma" in defaults:
        gamma, source = resolve_gamma(dict(options), algorithm)
        resolved.append(f"gamma={defaults['gamma'] if gamma is None else gamma} (from {source})")
    for option in ("step_advantage_w",):
        if option in defaults:
            given = option in options
            resolved.append(f"{option}={options[option] if given else defaults[option]} (from {'algorithm.rllm_estimator_kwargs' if given else 'the default'})")
    lines = [f"step level: one advantage per turn (runs of response_mask == 1); {', '.join(resolved) or 'no discount option'}"]
    if needs_of(spec, options).anchors:
        if use_v1:
            where = (
                "each output's extra_fields['anchor_states'] when the agent loop sets it, else the environment tokens before each turn "
                "from the rows' responses in TransferQueue (v1-batch extension)"
            )
        else:
            where = (
                "non_tensor_batch['anchor_states'] when the agent loop sets it (extra_fields), else the environment tokens before each "
                "turn from data.batch['responses'] (reward-key extension)"
            )
        lines.append(f"anchor states: {where}; turn 0 is anchored at the prompt")
    if spec.needs_values:
        lam, source = options.get("lam"), "algorithm.rllm_estimator_kwargs"
        if lam is None:
            lam, source = OmegaConf.select(algorithm, "lam", default=None), "algorithm.lam"  # type: ignore[arg-type]
        if lam is None:
            lam, source = defaults.get("lam"), "the default"
        held = "TransferQueue" if use_v1 else "the DataProto"
        lines.append(
            f"values: the critic's values at each turn's first model token ({held}); returns (the critic's targets) into "
            f"data.batch['returns']; lam={lam} (from {source})"
        )
    return lines, agent_loop_turn_warnings(config)


def _critic_error(name: str, spec: object, config: object) -> str | None:
    """For a value-based estimator (``needs_values``): an error unless ``critic.enable`` is true (verl runs a critic by default for ``gae`` only)."""
    from omegaconf import OmegaConf

    if not spec.needs_values or OmegaConf.select(config, "critic.enable", default=None) is True:  # type: ignore[attr-defined, arg-type]
        return None
    return (
        f"{name!r} is value-based: it reads the critic's values and trains the critic on its returns, but the critic is off "
        "(verl runs one by default only for adv_estimator=gae); set critic.enable=true"
    )


def _group_size(config: object) -> int:
    """Responses per prompt (``actor_rollout_ref.rollout.n``), 2 when the config does not say."""
    from omegaconf import OmegaConf

    n = OmegaConf.select(config, "actor_rollout_ref.rollout.n", default=None)
    return int(n) if isinstance(n, int) and n >= 1 else 2


def _trial_sizes(spec: object, options: Mapping[str, object], group_size: int) -> tuple[list[int], str]:
    """The group sizes to try (:data:`TRIAL_GROUP_SIZES` and ``group_size``) that the options allow, and a note on the rest."""
    from rllm_plugins.estimators import check_group_size

    sizes, refused = [], []
    for size in sorted({*TRIAL_GROUP_SIZES, group_size}):
        try:
            check_group_size(spec, options, size)  # type: ignore[arg-type]
        except ValueError:
            refused.append(size)
        else:
            sizes.append(size)
    note = f" (actor_rollout_ref.rollout.n={group_size}"
    note += f"; not {', '.join(map(str, refused))}: the estimator's options rule those sizes out)" if refused else ")"
    return sizes, note


def _provider_of(name: str, fn: object) -> str:
    """Who provides verl's estimator ``name`` that is not one of ours: verl itself, or the distribution of ``fn``'s module."""
    module = getattr(fn, "__module__", None) or "?"
    where = f"{module}.{getattr(fn, '__qualname__', '?')}"
    if module.split(".")[0] == "verl":
        return f"verl's own estimator ({where}), not rllm-plugins'"
    from importlib.metadata import packages_distributions

    dists = packages_distributions().get(module.split(".")[0], [])
    return f"{where} (distribution {', '.join(dists)})" if dists else where


def needs_reference_policy(config: object) -> bool:
    """Whether verl runs a reference policy (and so computes ``ref_log_prob``) with ``config``: ``algorithm.use_kl_in_reward`` or
    ``actor_rollout_ref.actor.use_kl_loss``, as verl's ``main_ppo`` decides on every supported release."""
    from omegaconf import OmegaConf

    in_reward = OmegaConf.select(config, "algorithm.use_kl_in_reward", default=False)  # type: ignore[arg-type]
    return bool(in_reward or OmegaConf.select(config, "actor_rollout_ref.actor.use_kl_loss", default=False))  # type: ignore[arg-type]


def _transform_errors(transforms: Sequence[object], config: object, shapers: Sequence[object] = ()) -> list[str]:
    """Why the selected ``transforms`` (or reward ``shapers``) would not run as configured: rllm-plugins not loaded in verl's
    processes (its extension of ``compute_advantage`` runs them, for every estimator), the extension off, or a reference
    log-prob without a reference policy."""
    from rllm_verl.compute.shaping import WHERE as SHAPERS_WHERE
    from rllm_verl.compute.transforms import WHERE
    from rllm_verl.context import REWARD_KEYS_ENV

    for selected, where, undone, kind in (
        (shapers, SHAPERS_WHERE, "unshaped rewards", "shapers"),
        (transforms, WHERE, "untransformed advantages", "transforms"),
    ):
        if not selected:
            continue
        names = ", ".join(repr(choice.label) for choice in selected)  # type: ignore[attr-defined]
        silent = (
            f"verl would not apply {where} ({names}; rllm-plugins applies them, with any estimator, verl's own included): "
            f"the run trains on {undone} without a word"
        )
        policy_error = entry_point_policy_error(consequence=silent)
        if policy_error is not None:
            return [policy_error]
        status = extension_status_of("reward_keys")
        if status != "active":  # they run inside that extension: without it they would silently not run
            message = f"{where} is set, but the extension of ray_trainer.compute_advantage that runs them is {status}"
            return [f"{message}; unset {REWARD_KEYS_ENV} or drop the {kind}"]
    if not transforms:
        return []
    needing = [choice for choice in transforms if "ref_logprobs" in choice.transform.spec.requires]  # type: ignore[attr-defined]
    if needing and not needs_reference_policy(config):
        label = needing[0].label  # type: ignore[attr-defined]
        return [
            f"{WHERE}: advantage transform {label!r} reads the reference policy's log-probabilities (data.batch['ref_log_prob']), "
            "which verl computes only when it runs a reference policy; this config runs none, so the first advantage step would fail. "
            "Fix: set actor_rollout_ref.actor.use_kl_loss=true (or algorithm.use_kl_in_reward=true), or drop the transform"
        ]
    return []


def _trial_failure(name: str, algorithm: object, config: object, sizes: Sequence[int]) -> tuple[str, list[int]] | None:
    """Run ``name`` (with the configured transforms) on toy batches of two groups of each of ``sizes`` through the configured
    trainer's function; the first failure's message and the sizes tried up to it, or None."""
    from omegaconf import OmegaConf

    from rllm_verl.compute.state import scratch_state

    use_v1 = bool(OmegaConf.select(config, "trainer.use_v1", default=False))  # type: ignore[arg-type]
    trainer = "v1 trainer (trainer.use_v1=true)" if use_v1 else "legacy trainer (trainer.use_v1=false)"
    for size in sizes:
        try:
            with scratch_state():  # a trial run leaves the state of stateful estimators as it was
                _dry_run(name, algorithm, size, use_v1, needs_reference_policy(config))
        except Exception as error:
            message = f"{name!r} fails on a toy batch of two groups of {size} with this config on verl's {trainer}: {type(error).__name__}: {error}"
            return message, list(sizes[: list(sizes).index(size) + 1])
    return None


def _requested_estimator(overrides: Sequence[str]) -> str | None:
    """The ``algorithm.adv_estimator`` the overrides set (``+``/``++`` prefixes allowed), for a config that cannot be composed."""
    values = [o.split("=", 1)[1] for o in overrides if "=" in o and o.split("=", 1)[0].lstrip("+~") == "algorithm.adv_estimator"]
    return values[-1] if values else None


def _import_failure() -> str | None:
    """Why verl's trainer cannot be imported here (a verdict with its fix), or None: a malformed ``VERL_USE_EXTERNAL_MODULES``
    (checked before anything is imported), else the import's own error."""
    from rllm_verl.tools.verl_import import verl_import_error

    modules_error = external_modules_error()
    if modules_error is not None:  # checked before anything is imported: verl may be imported here already
        return f"import verl fails in every process (the driver and Ray's workers): {modules_error}"
    return verl_import_error(("verl", "verl.trainer.ppo.ray_trainer"))


def verl_check(overrides: Sequence[str] = (), *, config_name: str = "ppo_trainer", config_dir: str | None = None) -> VerlCheckReport:
    """Compose verl's config with Hydra ``overrides`` and check that ``algorithm.adv_estimator`` will resolve.

    Returns a report, never raises: a bad estimator, option or config, a verl that cannot be imported and a plugin that raises
    each end in an error naming what failed and how to fix it.
    """
    from rllm_verl.versions import verl_features

    requested = _requested_estimator(overrides)
    blocked = str(verl_features().unsupported) if verl_features().unsupported else _import_failure()
    if blocked is not None:  # nothing of verl can be looked at
        unchecked = "not checked: verl cannot be imported"
        statuses = dict.fromkeys(("session_extension", "reward_key_extension", "v1_batch_extension", "estimator_state", "sync_trainer"), unchecked)
        return VerlCheckReport(False, requested, config_name, [], [blocked], registration=unchecked, **statuses)
    try:
        return _checked(overrides, config_name, config_dir)
    except Exception as error:  # a plugin or a verl internal raising where no check expects it
        message = (
            f"the check stopped at an unexpected {type(error).__name__}: {error} (raised in {_raised_at(error)}). Fix what it names; "
            "if it names rllm-plugins itself, report it with this line"
        )
        return VerlCheckReport(False, requested, config_name, [], [message])


def _raised_at(error: BaseException) -> str:
    """``module:line`` of the innermost frame of ``error``'s traceback."""
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"


def _checked(overrides: Sequence[str], config_name: str, config_dir: str | None) -> VerlCheckReport:
    """:func:`verl_check` once verl imports."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo import core_algos

    from rllm_plugins.discovery.mistakes import misplaced_entry_points
    from rllm_plugins.discovery.unresolved import failed_to_load, near_typo_hint
    from rllm_plugins.estimators import check_group_size
    from rllm_plugins.provenance import provenance_line
    from rllm_plugins.registry import get_estimator, unavailable_because
    from rllm_plugins.spec import unapplied_loss_warning
    from rllm_verl.compute.outcome import estimator_options, verl_provenance
    from rllm_verl.compute.shaping import shapers_of
    from rllm_verl.compute.transforms import transforms_of
    from rllm_verl.registration import VERL_PREFIX, register_estimators_into_verl
    from rllm_verl.tools.agent_loop import agent_loop_errors
    from rllm_verl.versions import verl_features

    rllm_names = register_estimators_into_verl()
    if entry_point_policy_error() is not None:  # verl will not load them in a real run
        rllm_names = []
    try:
        config = _compose(overrides, config_name, config_dir)
    except Exception as error:
        message = f"Hydra could not compose the config: {type(error).__name__}: {error}"
        return VerlCheckReport(False, _requested_estimator(overrides), config_name, rllm_names, [message])
    algorithm = config.get("algorithm")
    name = None if algorithm is None else algorithm.get("adv_estimator")
    if name is None:
        return VerlCheckReport(False, None, config_name, rllm_names, ["the config has no algorithm.adv_estimator"])
    name = str(name)
    try:  # algorithm.rllm_reward_shapers and rllm_advantage_transforms: names, options and values, before launch
        shapers, transforms = shapers_of(algorithm), transforms_of(algorithm)
    except ValueError as error:
        return VerlCheckReport(False, name, config_name, rllm_names, [str(error)])
    transform_errors = _transform_errors(transforms, config, shapers)
    if transform_errors:
        return VerlCheckReport(False, name, config_name, rllm_names, transform_errors)
    loop_errors = agent_loop_errors(config)  # verl fails on these only on its rollout workers
    if loop_errors:
        return VerlCheckReport(False, name, config_name, rllm_names, loop_errors)
    from rllm_verl.tools.resolved import algorithm_key_problems, context_rows, explicit_algorithm_keys, resolve_options, transform_rows

    verl_defaults = _compose([], "ppo_trainer", None).algorithm
    key_errors, key_warnings = algorithm_key_problems(algorithm, verl_defaults)
    if key_errors:
        return VerlCheckReport(False, name, config_name, rllm_names, key_errors, warnings=key_warnings)
    resolved = [*(list(row) for row in transform_rows(transforms, shapers)), *(list(row) for row in context_rows(config, registration_mechanism()))]
    known = sorted(core_algos.ADV_ESTIMATOR_REGISTRY)
    if name not in core_algos.ADV_ESTIMATOR_REGISTRY:
        because = unavailable_because(name.removeprefix(VERL_PREFIX)) if name.startswith(VERL_PREFIX) else None
        misplaced = [m for m in misplaced_entry_points() if m.intended in ("rllm_plugins", "verl.plugins")]
        if misplaced:
            because = f"{because or ''} Entry points in a misspelt group, never loaded, which may offer it: {'; '.join(map(str, misplaced))}.".strip()
        hint = near_typo_hint(name, known, narrowed=bool(misplaced) or (name.startswith(VERL_PREFIX) and failed_to_load()))
        message = f"unknown advantage estimator {name!r}.{f' {because}' if because else ''}{hint} verl knows: {', '.join(known)}"
        return VerlCheckReport(False, name, config_name, rllm_names, [message])
    ours = name.startswith(VERL_PREFIX) and core_algos.ADV_ESTIMATOR_REGISTRY[name].__module__.startswith("rllm_verl.")
    if not ours:
        provider = _provider_of(name, core_algos.ADV_ESTIMATOR_REGISTRY[name])
        theirs = f"{VERL_PREFIX}{name}"
        if theirs in core_algos.ADV_ESTIMATOR_REGISTRY and entry_point_policy_error() is None:
            provider += f"; rllm-plugins' {name} is {theirs!r}"
        if not transforms and not shapers:
            return VerlCheckReport(True, name, config_name, rllm_names, provider=provider, warnings=key_warnings, resolved=resolved)
        sizes, note = sorted({*TRIAL_GROUP_SIZES, _group_size(config)}), f" (actor_rollout_ref.rollout.n={_group_size(config)})"
        failure = _trial_failure(name, algorithm, config, sizes)  # the shapers, verl's own estimator, then the transforms
        if failure is not None:
            message, tried = failure
            return VerlCheckReport(False, name, config_name, rllm_names, [message], provider, tried, note, [], key_warnings, resolved)
        return VerlCheckReport(True, name, config_name, rllm_names, [], provider, sizes, note, [], key_warnings, resolved)
    policy_error = entry_point_policy_error()
    if policy_error is not None:
        return VerlCheckReport(False, name, config_name, rllm_names, [policy_error])
    try:
        estimator = get_estimator(name.removeprefix(VERL_PREFIX))
    except ValueError as error:  # a plugin that did not load, or a name two plugins offer
        return VerlCheckReport(False, name, config_name, rllm_names, [f"{name!r} is registered in verl but cannot run: {error}"])
    provider = f"estimator {estimator.spec.name!r} of {estimator.provider}"
    group_size = _group_size(config)
    try:
        options = estimator_options(algorithm, f"advantage estimator {name!r}", {name.removeprefix(VERL_PREFIX): estimator})
    except ValueError as error:
        return VerlCheckReport(False, name, config_name, rllm_names, [str(error)])
    given = {k: v for k, v in options.items() if k != "norm_adv_by_std_in_grpo"}
    option_rows, option_errors = resolve_options(name, estimator, algorithm, given, explicit_algorithm_keys(overrides), verl_defaults)
    resolved = [*(list(row) for row in option_rows), *resolved]
    if option_errors:
        return VerlCheckReport(False, name, config_name, rllm_names, option_errors, provider=provider, warnings=key_warnings, resolved=resolved)
    try:
        check_group_size(estimator.spec, options, group_size)
    except ValueError as error:
        message = f"{name!r} with actor_rollout_ref.rollout.n={group_size}: {error}"
        return VerlCheckReport(False, name, config_name, rllm_names, [message], provider=provider)
    critic_error = _critic_error(name, estimator.spec, config)
    if critic_error is not None:
        return VerlCheckReport(False, name, config_name, rllm_names, [critic_error], provider=provider)
    use_v1 = bool(OmegaConf.select(config, "trainer.use_v1", default=False))
    features = verl_features()
    if use_v1 and not features.v1_trainer:
        message = f"trainer.use_v1=true: verl {features.version} has no v1 trainer (it came with verl 0.9.0); remove trainer.use_v1 or upgrade verl"
        return VerlCheckReport(False, name, config_name, rllm_names, [message], provider=provider)
    step_lines, warnings = _step_level_lines(estimator, options, config, use_v1)
    loss_line = unapplied_loss_warning(estimator.spec, name, "verl's actor")
    warnings = [*warnings, loss_line] if loss_line else warnings
    sizes, note = _trial_sizes(estimator.spec, options, group_size)
    failure = _trial_failure(name, algorithm, config, sizes)
    if failure is not None:
        message, tried = failure
        return VerlCheckReport(False, name, config_name, rllm_names, [message], provider, tried, note, step_lines, [*key_warnings, *warnings], resolved)
    made_by = provenance_line(verl_provenance(estimator, options, algorithm))
    return VerlCheckReport(True, name, config_name, rllm_names, [], provider, sizes, note, step_lines, [*key_warnings, *warnings], resolved, provenance=made_by)


@contextlib.contextmanager
def _held_output() -> Iterator[list[str]]:
    """Hold back what is printed meanwhile (verl's import warnings and log lines, from Python or C); yields a list that gets the text."""
    held: list[str] = []
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as sink:
        python_streams = sys.stdout, sys.stderr
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        sys.stdout = sys.stderr = sink
        try:
            yield held
        finally:
            sink.flush()
            sys.stdout, sys.stderr = python_streams
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            sink.seek(0)
            held.append(sink.read())


def main(argv: Sequence[str] | None = None) -> int:
    """``rllm-plugins verl-check [--json] [--verbose] [--config-name NAME] [--config-dir DIR] OVERRIDES...``; exit 0 when it resolves, 1 otherwise."""
    parser = argparse.ArgumentParser(
        prog="rllm-plugins verl-check",
        description="Compose verl's Hydra config with the given overrides and check algorithm.adv_estimator before launching a run: "
        "that it resolves, who provides it, its options, and (for rllm_* names) a trial run on toy groups of several sizes.",
    )
    parser.add_argument("overrides", nargs="*", help="verl's Hydra overrides, e.g. algorithm.adv_estimator=rllm_rloo")
    parser.add_argument("--config-name", default="ppo_trainer", help="verl config to compose (default: ppo_trainer)")
    parser.add_argument("--config-dir", default=None, help="config directory (default: verl's trainer/config)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--verbose", action="store_true", help="also show what verl prints while it is imported (held back by default)")
    args = parser.parse_args(argv)
    with _held_output() as held:
        report = verl_check(args.overrides, config_name=args.config_name, config_dir=args.config_dir)
    print(json.dumps(report.as_dict(), indent=2) if args.json else report, flush=True)
    noise = held[0].strip()
    if noise and args.verbose:
        print(f"\nprinted by verl and its imports during the check:\n{noise}", file=sys.stderr)
    elif noise:
        print(f"({len(noise.splitlines())} lines printed by verl and its imports during the check are held back; --verbose shows them)", file=sys.stderr)
    return 0 if report.ok else 1
