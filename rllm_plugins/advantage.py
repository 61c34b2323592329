"""``collect_reward_and_advantage_from_trajectory_groups``: one estimator call per role, broadcast, metrics.

Two phases: everything is computed and validated first, then written to the steps, so an
error leaves every ``step.advantage`` as it was.

Several named rewards per trajectory live in ``Trajectory.metadata["rewards"]`` (name -> number or
None); when a role's trajectories carry them, they replace ``Trajectory.reward`` and
``AlgorithmConfig.multi_objective_aggregation`` combines them (:mod:`.aggregation`).
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .calling import as_finite_real, describe
from .config import PER_STEP_DEPRECATION, AlgorithmConfig
from .options import check_estimator_kwargs, spec_options
from .provenance import provenance, provenance_line
from .registry import get_estimator
from .run import Call, Commit, Wording, run_outcome, run_outcome_listed, run_steps
from .segments import GroupLayout, offsets_from_sizes
from .shaping.entries import check_shaper_context
from .shaping.stage import Shapers
from .spec import flatten_groups, normalize_name
from .steps.diagnostics import turn_metrics
from .steps.inputs import step_batch_from_groups
from .transforms.stage import Transforms
from .types import Step, TrajectoryGroup

if TYPE_CHECKING:
    from .spec import Estimator

__all__ = ["REWARDS_KEY", "AdvantageMetrics", "collect_reward_and_advantage_from_trajectory_groups", "compute_role_metrics"]

REWARDS_KEY = "rewards"  # Trajectory.metadata[REWARDS_KEY]: several named rewards, name -> number or None


def _warn(message: str, *args: object) -> None:
    """Log a warning on this module's logger (``logging`` is imported on first use: it is not needed to import us)."""
    import logging

    logging.getLogger(__name__).warning(message, *args)


class AdvantageMetrics(dict):  # type: ignore[type-arg]  # dict[str, float], as rLLM's collector returns
    """The collector's metrics, a ``dict`` of float values as rLLM's, and beside them, not among them, ``provenance``: which
    code computed the advantages (:func:`rllm_plugins.provenance.provenance`; None when the call computed none)."""

    provenance: dict[str, Any] | None = None

    @property
    def provenance_line(self) -> str | None:
        """``provenance`` as one line (:func:`rllm_plugins.provenance.provenance_line`), None when there is none."""
        return None if self.provenance is None else provenance_line(self.provenance)


ZERO_ADVANTAGE = 1e-8  # |a| below this counts towards advantage/<role>/fraction_zero


@dataclass
class _RoleBatch:
    """The RL-mode groups of one role, with their indices in the caller's list."""

    groups: list[TrajectoryGroup] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)
    rewards: list[np.ndarray] = field(default_factory=list)
    named: list[list[dict[str, float | None]] | None] = field(default_factory=list)  # per group: each trajectory's named rewards


def _where(role: str, index: int, group: TrajectoryGroup, traj: int | None = None) -> str:
    text = f"role {role!r}, group {index} (group_id {group.group_id!r})"
    return text if traj is None else f"{text}, trajectory {traj}"


def _shown(reward: object) -> str:
    """A non-finite float as itself (``nan``, ``inf``); an int beyond the float64 range with its type, shortened."""
    return str(reward) if isinstance(reward, (float, np.floating)) else describe(reward)


def _trajectory_rewards(group: TrajectoryGroup, index: int, role: str) -> np.ndarray:
    rewards = np.empty(len(group.trajectories), dtype=np.float64)
    for t, traj in enumerate(group.trajectories):
        reward = traj.reward
        if reward is None:
            raise ValueError(f"{_where(role, index, group, t)}: trajectory reward is None; every trajectory needs a reward in broadcast mode")
        if not isinstance(reward, (numbers.Real, np.bool_)):  # bools count as 0/1, like numpy
            raise ValueError(f"{_where(role, index, group, t)}: trajectory reward must be a real number, got {type(reward).__name__} {reward!r}")
        number = as_finite_real(reward)
        if number is None:
            raise ValueError(f"{_where(role, index, group, t)}: trajectory reward is {_shown(reward)}; rewards must be finite")
        rewards[t] = number
    return rewards


def _named_rewards(group: TrajectoryGroup, index: int, role: str) -> list[dict[str, float | None]] | None:
    """Each trajectory's ``metadata["rewards"]``, checked; None when no trajectory of the group has them."""
    carried = [isinstance(t.metadata, Mapping) and REWARDS_KEY in t.metadata for t in group.trajectories]
    if not any(carried):
        return None
    out = []
    for t, traj in enumerate(group.trajectories):
        where = _where(role, index, group, t)
        if not carried[t]:
            raise ValueError(f"{where}: metadata[{REWARDS_KEY!r}] is missing while other trajectories of the group have named rewards")
        raw = traj.metadata[REWARDS_KEY]  # type: ignore[index]
        if not isinstance(raw, Mapping) or not raw:
            raise ValueError(f"{where}: metadata[{REWARDS_KEY!r}] must be a non-empty mapping of reward name -> number or None, got {raw!r}")
        named: dict[str, float | None] = {}
        for name, value in raw.items():
            if not isinstance(name, str):
                raise ValueError(f"{where}: metadata[{REWARDS_KEY!r}] has a non-string name {name!r}")
            number = None if value is None else as_finite_real(value)
            if value is not None and number is None:
                raise ValueError(f"{where}: named reward {name!r} must be a finite number or None, got {describe(value)}")
            named[name] = number
        if all(v is None for v in named.values()):
            raise ValueError(f"{where}: every named reward is None; a trajectory needs at least one reward in broadcast mode")
        out.append(named)
    return out


def _combined(named: list[dict[str, float | None]], weights: Mapping[str, float]) -> np.ndarray:
    """Weighted sum of each trajectory's present named rewards."""
    return np.array([sum(weights.get(n, 1.0) * v for n, v in rewards.items() if v is not None) for rewards in named], dtype=np.float64)


def _aggregate(
    role: str, batch: _RoleBatch, config: AlgorithmConfig, name: str, estimator: Estimator, transforms: Transforms | None, shapers: Shapers | None
) -> list[np.ndarray]:
    """The role's advantages by group from its named rewards (or, for ``normalize_then_sum``, its single reward)."""
    where = f"estimator {name!r} ({estimator.provider}) for role {role!r}"
    if estimator.spec.stateful:
        raise ValueError(
            f"{where} is stateful (a running baseline over single rewards); several named rewards (metadata[{REWARDS_KEY!r}]) "
            "and multi_objective_aggregation='normalize_then_sum' are not supported with it: give each trajectory one reward"
        )
    if any(named is None for named in batch.named) and not all(named is None for named in batch.named):
        g = next(i for i, named in enumerate(batch.named) if named is None)
        where_g = _where(role, batch.indices[g], batch.groups[g])
        raise ValueError(f"{where_g}: no named rewards (metadata[{REWARDS_KEY!r}]) while other groups of the role have them")
    if batch.named[0] is None:  # one reward per trajectory: Trajectory.reward
        names, table, weights = ["reward"], np.concatenate(batch.rewards).reshape(-1, 1), None
    else:
        rows = [rewards for named in batch.named for rewards in named]  # type: ignore[union-attr]
        names = list(dict.fromkeys(n for rewards in rows for n in rewards))
        table = np.array([[np.nan if rewards.get(n) is None else rewards[n] for n in names] for rewards in rows], dtype=np.float64)
        weights = [config.reward_weights.get(n, 1.0) for n in names]
    call = Call(estimator, {**config.estimator_kwargs, "norm_adv_by_std_in_grpo": config.norm_adv_by_std_in_grpo}, where, accepted_only=True)
    lengths = None
    if call.needs.lengths:
        lengths = np.array([sum(len(s.response_ids) for s in t.steps) for g in batch.groups for t in g.trajectories], dtype=np.float64)
    from .aggregation import aggregate_advantages  # only for several reward functions

    def combine(form: Any, values: np.ndarray, offsets: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        aggregation = config.multi_objective_aggregation
        return aggregate_advantages(values, offsets, form, aggregation=aggregation, weights=weights, names=names, where=where, **kwargs)

    offsets = offsets_from_sizes([len(g.trajectories) for g in batch.groups])
    wording = Wording("trajectories", lambda values, _: f"{where} gave the non-finite advantage {values[~np.isfinite(values)][0]}; advantages must be finite")
    values: np.ndarray = table
    if shapers is not None and shapers.selected and config.multi_objective_aggregation == "sum_then_normalize":
        values, combine = np.concatenate(batch.rewards), None  # the weighted sums (every trajectory has a reward): shaped, then estimated
    advantages, _ = run_outcome(
        call, values, offsets, wording=wording, role=role, lengths=lengths, combine=combine, context={"algorithm_config": config}, transforms=transforms,
        shapers=shapers,
    )  # fmt: skip
    return GroupLayout.from_offsets(offsets, advantages.size).split(advantages)


def _precomputed(group: TrajectoryGroup, index: int, role: str) -> tuple[list[tuple[Step, list[float]]], list[float], int]:
    """Per-token advantages of a precomputed group: (step, tokens) to write, flat values, mismatches.

    A per-token list whose length is not the step's ``response_ids`` becomes zeros, as in rLLM (counted in ``mismatches``).
    """
    writes: list[tuple[Step, list[float]]] = []
    flat: list[float] = []
    mismatches = 0
    for t, traj in enumerate(group.trajectories):
        for s, step in enumerate(traj.steps):
            n = len(step.response_ids)
            adv = step.advantage
            if adv is None:
                tokens = [0.0] * n
            elif isinstance(adv, numbers.Real) and not isinstance(adv, bool):
                number = as_finite_real(adv)  # None for NaN, inf and 10**400: refused below as not finite
                tokens = [math.nan if number is None else number] * n
            else:
                try:
                    if isinstance(adv, (str, bytes)):
                        raise TypeError(adv)
                    tokens = [float(a) for a in adv]
                except OverflowError:
                    raise ValueError(f"{_where(role, index, group, t)}, step {s}: precomputed advantage is not finite") from None
                except (TypeError, ValueError):
                    raise ValueError(
                        f"{_where(role, index, group, t)}, step {s}: precomputed advantage must be a number or a list of numbers, "
                        f"got {type(adv).__name__} {adv!r}"
                    ) from None
                if not all(math.isfinite(a) for a in tokens):
                    raise ValueError(f"{_where(role, index, group, t)}, step {s}: precomputed advantage is not finite")
                if len(tokens) != n:  # as both rLLM generations: zeros, a warning (and a count in the metrics)
                    mismatches += 1
                    _warn(
                        "%s, step %d: precomputed advantage has %d values for %d response tokens; defaulting to zeros",
                        _where(role, index, group, t),
                        s,
                        len(tokens),
                        n,
                    )
                    tokens = [0.0] * n
            if not all(math.isfinite(a) for a in tokens):
                raise ValueError(f"{_where(role, index, group, t)}, step {s}: precomputed advantage is not finite")
            writes.append((step, tokens))
            flat.extend(tokens)
    return writes, flat, mismatches


def _call_estimator(
    role: str,
    batch: _RoleBatch,
    config: AlgorithmConfig,
    name: str,
    estimator: Estimator,
    commits: list[Commit],
    transforms: Transforms | None,
    shapers: Shapers | None,
) -> list[np.ndarray]:
    """Run the role's estimator (``name``, resolved) on its list form and check its output against the groups; a stateful one's commit goes into ``commits``."""
    options = {**config.estimator_kwargs, "norm_adv_by_std_in_grpo": config.norm_adv_by_std_in_grpo}
    if not spec_options(estimator.spec).open:  # options meant for another role's estimator (estimator_map) stay out of this call
        options = {k: v for k, v in options.items() if k in spec_options(estimator.spec).defaults or k not in config.estimator_kwargs}
    call = Call(estimator, options, f"estimator {name!r} ({estimator.provider}) for role {role!r}", accepted_only=True)

    def group(g: int) -> Wording:
        index, trajectories = batch.indices[g], batch.groups[g]
        place = _where(role, index, trajectories)

        def not_finite(advantages: np.ndarray, _: str) -> str:
            t = int(np.flatnonzero(~np.isfinite(advantages))[0])
            return f"{call.who}: {_where(role, index, trajectories, t)} got advantage {advantages[t]}; advantages must be finite"

        return Wording(
            lambda given, expected: f"{call.who}: {place} got {given} advantages for {expected} trajectories",
            not_finite,
            who=f"estimator {name!r} ({estimator.provider}) for {place}",
        )

    values, offsets = flatten_groups(batch.rewards)
    task_ids = np.array([group.task_id for group in batch.groups for _ in group.trajectories], dtype=object) if call.needs.state else None
    advantages, commit = run_outcome_listed(
        call,
        values,
        offsets,
        wording=group,
        role=role,
        context={"rewards": batch.rewards, "algorithm_config": config, "traj_groups": batch.groups},
        state=config.estimator_state,
        task_ids=task_ids,
        transforms=transforms,
        shapers=shapers,
    )
    commits.append(commit)
    return GroupLayout.from_offsets(offsets, advantages.size).split(advantages)


def _call_step_estimator(
    role: str,
    batch: _RoleBatch,
    config: AlgorithmConfig,
    name: str,
    estimator: Estimator,
    commits: list[Commit],
    transforms: Transforms | None,
    shapers: Shapers | None,
) -> tuple[list[list[np.ndarray]], list[list[np.ndarray]] | None, dict[str, float]]:
    """Run the role's step-level estimator (``name``, resolved): per group, per trajectory, one advantage per step; the
    returns the same way (a value-based estimator; else None); and anchor metrics.

    It gets what it needs with the config's options (:attr:`rllm_plugins.run.Call.needs`): anchor states, lengths,
    values, its state (whose commit goes into ``commits``).
    """
    who = f"step-level estimator {name!r} ({estimator.provider}) for role {role!r}"
    if config.multi_objective_aggregation == "normalize_then_sum":
        raise ValueError(
            f"{who}: multi_objective_aggregation='normalize_then_sum' combines outcome advantages and has no per-step form; "
            "use 'sum_then_normalize' (the step-level estimator then reads the weighted sum as the outcome)"
        )
    call = Call(estimator, {**config.estimator_kwargs, "norm_adv_by_std_in_grpo": config.norm_adv_by_std_in_grpo}, who, accepted_only=True)
    needs = call.needs
    steps = step_batch_from_groups(
        batch.groups,
        batch.rewards,
        lambda g, i: _where(role, batch.indices[g], batch.groups[g], i),
        with_anchors=needs.anchors,
        who=who,
        with_lengths=needs.lengths,
        with_values=needs.values,
    )

    def not_finite(values: np.ndarray, what: str) -> str:
        s = int(np.flatnonzero(~np.isfinite(values))[0])
        i = int(np.searchsorted(steps.step_offsets, s, side="right") - 1)
        g = int(np.searchsorted(steps.traj_offsets, i, side="right") - 1)
        where = _where(role, batch.indices[g], batch.groups[g], i - int(steps.traj_offsets[g]))
        return f"{who}: {where}, step {s - int(steps.step_offsets[i])} got {what} {values[s]}; {what}s must be finite"

    task_ids = np.array([group.task_id for group in batch.groups for _ in group.trajectories], dtype=object) if needs.state else None
    advantages, returns, commit = run_steps(
        call,
        steps,
        wording=Wording("steps", not_finite),
        role=role,
        state=config.estimator_state,
        task_ids=task_ids,
        context={"algorithm_config": config, "traj_groups": batch.groups},
        transforms=transforms,
        shapers=shapers,
    )
    commits.append(commit)
    bounds = steps.traj_offsets.tolist()

    def by_group(per_step: np.ndarray) -> list[list[np.ndarray]]:
        per_traj = steps.steps.split(per_step)
        return [per_traj[a:b] for a, b in itertools.pairwise(bounds)]

    metrics: dict[str, float] = {}
    for key, value in turn_metrics(advantages, steps.step_rewards, steps.step_offsets).items():
        metrics[f"turn/{role}/{key.removeprefix('turn/')}"] = value
    if steps.anchors is not None and steps.num_steps:
        sizes = np.bincount(steps.anchors)
        metrics[f"batch/{role}/anchor_groups/mean_size"] = float(steps.num_steps / sizes.size)
        metrics[f"batch/{role}/anchor_groups/fraction_singleton_steps"] = float(np.mean(sizes[steps.anchors] == 1))
    return by_group(advantages), by_group(returns) if returns is not None else None, metrics


def _transforms(groups: list[TrajectoryGroup], rewards: list[np.ndarray] | None, config: AlgorithmConfig) -> Transforms | None:
    """``config.advantage_transforms`` as a run applies them to one role's ``groups``: the context of its units, per trajectory
    (``rewards`` the trajectory rewards by group: outcome level) or per step (``rewards`` None: each step's own reward);
    ``mean_logprobs`` where every step has ``Step.logprobs`` for each response token."""
    if not config.advantage_transforms:
        return None
    trajectories = [traj for group in groups for traj in group.trajectories]
    units = [traj.steps for traj in trajectories] if rewards is not None else [[step] for traj in trajectories for step in traj.steps]
    lengths = np.array([sum(len(step.response_ids) for step in steps) for steps in units], dtype=np.float64)
    context: dict[str, Any] = {"lengths": lengths}
    if rewards is None:
        context["rewards"] = np.array([float(step.reward or 0.0) for steps in units for step in steps], dtype=np.float64)
    elif rewards:
        context["rewards"] = np.concatenate(rewards)
    if "rewards" in context:  # the collector shapes no reward: the task score is the reward
        context["scores"] = context["rewards"]
    if all(len(step.logprobs) == len(step.response_ids) for steps in units for step in steps) and lengths.all():  # Step.logprobs: every token's
        context["mean_logprobs"] = np.array([sum(sum(step.logprobs) for step in steps) for steps in units], dtype=np.float64) / lengths
    return Transforms(config.transforms, "AlgorithmConfig.advantage_transforms", context)


SHAPER_CONTEXT_HERE = {"offsets", "scores", "lengths", "input_lengths", "turns"}  # what the collector gives a shaper (no tool tokens)


def _shapers(groups: list[TrajectoryGroup], config: AlgorithmConfig) -> Shapers | None:
    """``config.reward_shapers`` as a run applies them to one role's ``groups``: per trajectory its model tokens (its steps'
    ``response_ids``), its prompt tokens (its first step's ``prompt_ids``; none when no trajectory has any) and its turns."""
    if not config.reward_shapers:
        return None
    check_shaper_context(config.shapers, SHAPER_CONTEXT_HERE, "AlgorithmConfig.reward_shapers", "the collector")
    trajectories = [traj for group in groups for traj in group.trajectories]
    lengths = np.array([sum(len(step.response_ids) for step in traj.steps) for traj in trajectories], dtype=np.float64)
    prompts = [len(traj.steps[0].prompt_ids) if traj.steps else 0 for traj in trajectories]
    context: dict[str, Any] = {
        "lengths": lengths,
        "turns": np.array([len(traj.steps) for traj in trajectories], dtype=np.float64),
        "input_lengths": np.array(prompts, dtype=np.float64) if any(prompts) else None,  # none at all: the path has no prompts
    }
    return Shapers(config.shapers, "AlgorithmConfig.reward_shapers", context)


def compute_role_metrics(values_by_role: dict[str, Sequence[float]], prefix: str, with_fraction_zero: bool = False) -> dict[str, float]:
    """``{prefix}/{role}/{mean,std,max,min}`` (+ ``fraction_zero``) of each role's values."""
    metrics: dict[str, float] = {}
    for role, values in values_by_role.items():
        arr = np.asarray(values, dtype=np.float64)
        if arr.size == 0:
            continue
        whole = GroupLayout.from_offsets([0, arr.size], arr.size)  # overflow-safe mean and std (rewards up to ~1e300)
        mean = whole.mean(arr)
        metrics[f"{prefix}/{role}/mean"] = float(mean[0])
        metrics[f"{prefix}/{role}/std"] = float(whole.std(arr, mean)[0])
        metrics[f"{prefix}/{role}/max"] = float(arr.max())
        metrics[f"{prefix}/{role}/min"] = float(arr.min())
        if with_fraction_zero:
            metrics[f"{prefix}/{role}/fraction_zero"] = float(np.mean(np.abs(arr) < ZERO_ADVANTAGE))
    return metrics


def collect_reward_and_advantage_from_trajectory_groups(
    groups: list[TrajectoryGroup],
    algorithm_config: AlgorithmConfig,
    collect_advantage: bool = True,
) -> AdvantageMetrics:
    """Compute each role's advantages, write them to the steps, and return metrics.

    Groups are split by ``group_role``; each role's RL-mode groups go to one call of its
    estimator (``estimator_map[role]``, else ``estimator``). With an outcome-level estimator
    every step of a trajectory gets the trajectory's advantage (broadcast); with a step-level one
    (:mod:`.steps.forms`) every step gets its own, from ``Step.reward`` and the anchor states
    (:mod:`.steps.inputs`). With ``use_precomputed_advantage`` and some step of a group carrying
    an advantage, that group's per-token advantages are used instead (float -> repeated over
    ``response_ids``, missing or a list of the wrong length -> zeros). ``collect_advantage=False``
    only collects rewards. Trajectories with named rewards (``metadata["rewards"]``) are combined
    by ``multi_objective_aggregation``. Metrics: ``reward/{role}/{mean,std,max,min}`` (of the
    weighted sum for named rewards), ``reward/{role}/{name}/{mean,std,max,min}`` per named reward,
    ``advantage/{role}/{mean,std,max,min,fraction_zero}`` (over trajectories, or over steps for a
    step-level role, with ``batch/{role}/anchor_groups/...``) and the ``batch/{role}/...`` group
    diagnostics of :mod:`.diagnostics`; empty groups contribute nothing.

    The metrics come as :class:`AdvantageMetrics`, a ``dict`` whose values are all floats (rLLM's contract), with the
    attribute ``provenance``: the estimator of each role this call ran, the transforms, their options, where each comes
    from and the rllm-plugins version (:mod:`.provenance`; ``provenance_line`` its text form), None when no estimator ran.
    """
    selected: dict[str, Estimator] = {}  # each name the config uses, resolved once per call (when first needed)
    if collect_advantage:  # every estimator the config selects gets the kwargs (and one that needs options refuses none now)
        names = dict.fromkeys(normalize_name(name) for name in (algorithm_config.estimator, *algorithm_config.estimator_map.values()))
        selected = {name: get_estimator(name) for name in names}
        check_estimator_kwargs(
            selected, algorithm_config.estimator_kwargs, where="AlgorithmConfig.estimator_kwargs", norm_field="AlgorithmConfig.norm_adv_by_std_in_grpo"
        )

    rewards_by_role: dict[str, list[float]] = {}
    named_by_role: dict[str, list[float]] = {}  # "{role}/{reward name}" -> the present values
    advantages_by_role: dict[str, list[float]] = {}
    role_batches: dict[str, _RoleBatch] = {}
    token_writes: list[tuple[Step, list[float]]] = []
    mismatches_by_role: dict[str, int] = {}

    for index, group in enumerate(groups):
        if not group.trajectories:
            continue
        role = group.group_role
        has_precomputed = any(step.advantage is not None for traj in group.trajectories for step in traj.steps)
        if has_precomputed and algorithm_config.use_precomputed_advantage:
            if collect_advantage:
                writes, flat, mismatches = _precomputed(group, index, role)
                token_writes.extend(writes)
                advantages_by_role.setdefault(role, []).extend(flat)
                if mismatches:
                    mismatches_by_role[role] = mismatches_by_role.get(role, 0) + mismatches
            continue
        if collect_advantage and has_precomputed:
            _warn(
                "%s: steps carry precomputed advantages but use_precomputed_advantage is False; overwriting them with %r",
                _where(role, index, group),
                algorithm_config.estimator_name(role),
            )
        named = _named_rewards(group, index, role)
        rewards = _trajectory_rewards(group, index, role) if named is None else _combined(named, algorithm_config.reward_weights)
        rewards_by_role.setdefault(role, []).extend(rewards.tolist())
        for traj_rewards in named or ():
            for name, value in traj_rewards.items():
                named_by_role.setdefault(f"{role}/{name}", []).extend(() if value is None else (value,))
        if collect_advantage:
            batch = role_batches.setdefault(role, _RoleBatch())
            batch.groups.append(group)
            batch.indices.append(index)
            batch.rewards.append(rewards)
            batch.named.append(named)

    unknown = sorted(set(algorithm_config.reward_weights) - {key.split("/", 1)[1] for key in named_by_role})
    if unknown and (named_by_role or role_batches or rewards_by_role):
        raise ValueError(f"AlgorithmConfig.reward_weights names {unknown}, which no trajectory carries in metadata[{REWARDS_KEY!r}]; check the names")
    broadcast_writes: list[tuple[TrajectoryGroup, np.ndarray]] = []
    step_writes: list[tuple[TrajectoryGroup, list[np.ndarray], list[np.ndarray] | None]] = []  # group, advantages, returns
    step_metrics: dict[str, float] = {}
    commits: list[Commit] = []  # stateful estimators' new states: committed once every role succeeded
    for role, batch in role_batches.items():
        name = algorithm_config.estimator_name(role)
        if name not in selected:
            selected[name] = get_estimator(name)
        estimator = selected[name]
        if estimator.spec.level == "outcome" and algorithm_config.stepwise_advantage_mode == "per_step":
            import warnings

            warnings.warn(f"role {role!r}, estimator {estimator.spec.name!r} (outcome-level): {PER_STEP_DEPRECATION}", DeprecationWarning, stacklevel=2)
        shapers = _shapers(batch.groups, algorithm_config)
        if estimator.spec.level == "step":
            transforms = _transforms(batch.groups, None, algorithm_config)
            by_group, returns_by_group, anchor_metrics = _call_step_estimator(role, batch, algorithm_config, name, estimator, commits, transforms, shapers)
            step_metrics.update(anchor_metrics)
            step_metrics.update(shapers.metrics if shapers else {})
            step_metrics.update(transforms.metrics if transforms else {})
            for g, (group, per_traj) in enumerate(zip(batch.groups, by_group, strict=True)):
                step_writes.append((group, per_traj, None if returns_by_group is None else returns_by_group[g]))
                advantages_by_role.setdefault(role, []).extend(np.concatenate(per_traj).tolist())
            continue
        transforms = _transforms(batch.groups, batch.rewards, algorithm_config)
        if algorithm_config.multi_objective_aggregation == "normalize_then_sum" or any(named is not None for named in batch.named):
            advantages_by_group = _aggregate(role, batch, algorithm_config, name, estimator, transforms, shapers)
        else:
            advantages_by_group = _call_estimator(role, batch, algorithm_config, name, estimator, commits, transforms, shapers)
        step_metrics.update(transforms.metrics if transforms else {})
        step_metrics.update(shapers.metrics if shapers else {})
        for group, advantages in zip(batch.groups, advantages_by_group, strict=True):
            broadcast_writes.append((group, advantages))
            advantages_by_role.setdefault(role, []).extend(advantages.tolist())

    # every check passed: write
    for group, advantages in broadcast_writes:
        for traj, advantage in zip(group.trajectories, advantages.tolist(), strict=True):
            for step in traj.steps:
                step.advantage = advantage
    for group, per_traj, targets in step_writes:
        for t, (traj, advantages) in enumerate(zip(group.trajectories, per_traj, strict=True)):
            for step, advantage in zip(traj.steps, advantages.tolist(), strict=True):
                step.advantage = advantage
            if targets is not None:  # a value-based estimator: the critic's targets
                for step, target in zip(traj.steps, targets[t].tolist(), strict=True):
                    step.value_target = target
    for step, tokens in token_writes:
        step.advantage = tokens
    for commit in commits:
        commit()

    metrics = AdvantageMetrics(compute_role_metrics(rewards_by_role, "reward"))
    metrics.update(compute_role_metrics(named_by_role, "reward"))
    if role_batches:
        options = {**algorithm_config.estimator_kwargs, "norm_adv_by_std_in_grpo": algorithm_config.norm_adv_by_std_in_grpo}
        ran = {role: selected[algorithm_config.estimator_name(role)] for role in role_batches}
        metrics.provenance = provenance(ran, algorithm_config.transforms, options, algorithm_config.shapers)
    if collect_advantage:
        metrics.update(compute_role_metrics(advantages_by_role, "advantage", with_fraction_zero=True))
        for role, count in mismatches_by_role.items():
            metrics[f"advantage/{role}/precomputed_length_mismatches"] = float(count)
        from .diagnostics import batch_diagnostics  # not needed by `import rllm_plugins`

        metrics.update(batch_diagnostics({role: flatten_groups(batch.rewards) for role, batch in role_batches.items()}))
        metrics.update(step_metrics)
    return metrics
