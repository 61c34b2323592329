"""The two calling forms of a step-level estimator, and how each derives the other.

**Batched form** (what the collector and the adapters call): ``batched(batch: StepBatch, /, **kwargs)
-> advantages`` ``(S,)``, one per step in :class:`~rllm_plugins.steps.StepBatch` order.

**List form** (rLLM's style, nested per group and trajectory)::

    fn(rewards, step_rewards, anchor_states=None, **kwargs) -> (advantages_by_group, returns_by_group)

``rewards[g]`` the outcomes of group ``g`` ``(n_g,)``; ``step_rewards[g][i]`` the rewards of the steps of
trajectory ``i`` ``(T_i,)``; ``anchor_states[g][i][t]`` the anchor of step ``t``; both outputs ``[g][i]``
arrays ``(T_i,)`` (the built-ins return the advantages twice, as rLLM's do).

The collector, the adapters and ``rllm-plugins check`` call a list-form plugin the same way, through
:func:`step_batched_form_of`: its ``anchor_states[g][i][t]`` are the batch's anchor-group ids (ints;
equal ids = one anchor group, an id never in two task groups; :func:`anchor_id_lists`), or None
unless its spec says ``needs_anchors=True``. A derived list form (of a batched estimator) also takes
any hashable states and groups them by value (:mod:`.anchors`).

**Value-based estimators** (``needs_values=True``): the list form also takes ``step_values[g][i]`` (a critic's
value of each step ``(T_i,)``) and ``step_tokens[g][i]`` (model tokens per step, or None), and its
``returns_by_group`` are the critic's targets, not a copy of the advantages; the batched form reads
``StepBatch.step_values`` / ``step_tokens`` and returns ``(advantages, returns)``, both ``(S,)``
(:func:`split_step_output`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..calling import accepted_keywords, call_with_accepted_kwargs, check_call_options, closed_keywords, flatten_groups, refuse_unknown_options
from ..outputs import as_advantages, as_groups
from .anchors import anchor_ids
from .batch import StepBatch

__all__ = ["anchor_id_lists", "batch_from_lists", "split_step_output", "step_batched_form_of", "step_list_form_of"]

StepListEstimator = Callable[..., tuple[Sequence[Any], Sequence[Any]]]
StepBatchedEstimator = Callable[..., np.ndarray]


def _nested(values: np.ndarray, batch: StepBatch) -> list[list[np.ndarray]]:
    """``(S,)`` -> ``[group][trajectory]`` arrays of step values."""
    per_traj = batch.steps.split(values)
    bounds = batch.traj_offsets.tolist()
    return [per_traj[a:b] for a, b in itertools.pairwise(bounds)]


def anchor_id_lists(batch: StepBatch) -> list[list[list[int]]] | None:
    """The batch's anchor-group ids ``[group][trajectory][step]``, what a list-form plugin receives as ``anchor_states`` (None: none)."""
    if batch.anchors is None:
        return None
    return [[a.tolist() for a in group] for group in _nested(batch.anchors, batch)]


def split_step_output(result: Any, with_returns: bool, num_steps: int, who: str) -> tuple[np.ndarray, np.ndarray]:
    """A batched step-level form's output as ``(advantages, returns)`` ``(S,)`` each, checked for size.

    ``with_returns`` (a value-based estimator): ``result`` is the pair; otherwise it is the advantages, which are also the returns.
    """
    if with_returns:
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise ValueError(f"{who} is value-based (needs_values=True): its batched form must return (advantages, returns), got {type(result).__name__}")
        advantages, returns = as_advantages(result[0], who), as_advantages(result[1], f"{who} (returns)")
    else:
        advantages = returns = as_advantages(result, who)
    for what, values in (("advantages", advantages), ("returns", returns)):
        if values.size != num_steps:
            raise ValueError(f"{who} returned {values.size} {what} for {num_steps} steps")
    return advantages, returns


def _nested_per_step(values: Sequence[Any], what: str, step_offsets: np.ndarray, traj_offsets: np.ndarray) -> np.ndarray:
    """``values[g][i]`` (one number per step of trajectory ``i`` of group ``g``) flat ``(S,)``; ``ValueError`` names group and trajectory."""
    groups = len(traj_offsets) - 1
    if len(values) != groups:
        raise ValueError(f"{what} has {len(values)} groups, rewards {groups}")
    parts: list[np.ndarray] = []
    for g, group in enumerate(values):
        first, last = int(traj_offsets[g]), int(traj_offsets[g + 1])
        if len(group) != last - first:
            raise ValueError(f"group {g}: {what} has {len(group)} trajectories, rewards {last - first}")
        for i, traj in enumerate(group):
            n = int(step_offsets[first + i + 1] - step_offsets[first + i])
            try:
                part = np.asarray(traj, dtype=np.float64).reshape(-1)
            except (TypeError, ValueError):
                raise ValueError(f"group {g}, trajectory {i}: {what} must be numbers, got {traj!r}") from None
            if part.size != n:
                raise ValueError(f"group {g}, trajectory {i}: {part.size} {what} for {n} step rewards")
            parts.append(part)
    return np.concatenate(parts) if parts else np.zeros(0)


def batch_from_lists(
    rewards: Sequence[Any],
    step_rewards: Sequence[Any],
    anchor_states: Sequence[Any] | None,
    step_values: Sequence[Any] | None = None,
    step_tokens: Sequence[Any] | None = None,
) -> StepBatch:
    """The list form's nested inputs as a :class:`StepBatch`; ``ValueError`` names group, trajectory and step."""
    outcomes, traj_offsets = flatten_groups(rewards)
    if len(step_rewards) != len(rewards):
        raise ValueError(f"step_rewards has {len(step_rewards)} groups, rewards {len(rewards)}")
    per_traj: list[np.ndarray] = []
    for g, group in enumerate(step_rewards):
        if len(group) != traj_offsets[g + 1] - traj_offsets[g]:
            raise ValueError(f"group {g}: step_rewards has {len(group)} trajectories, rewards {traj_offsets[g + 1] - traj_offsets[g]}")
        for i, traj in enumerate(group):
            try:
                values, _ = flatten_groups([traj])
            except ValueError as e:
                detail = str(e).replace("group 0, trajectory", "step").replace("group 0: rewards", "step rewards")
                raise ValueError(f"group {g}, trajectory {i}: {detail}") from None
            if values.size == 0:  # as the collector: no step, nothing to give an advantage to
                raise ValueError(f"group {g}, trajectory {i}: the trajectory has no steps; a step-level estimator gives one advantage per step")
            per_traj.append(values)
    flat_rewards = np.concatenate(per_traj) if per_traj else np.zeros(0)
    step_offsets = np.zeros(len(per_traj) + 1, dtype=np.int64)
    np.cumsum([v.size for v in per_traj], out=step_offsets[1:])
    anchors = None
    if anchor_states is not None:
        if len(anchor_states) != len(rewards):
            raise ValueError(f"anchor_states has {len(anchor_states)} groups, rewards {len(rewards)}")
        states: list[Hashable] = []
        for g, group in enumerate(anchor_states):
            if len(group) != traj_offsets[g + 1] - traj_offsets[g]:
                raise ValueError(f"group {g}: anchor_states has {len(group)} trajectories, rewards {traj_offsets[g + 1] - traj_offsets[g]}")
            for i, traj in enumerate(group):
                n = step_offsets[traj_offsets[g] + i + 1] - step_offsets[traj_offsets[g] + i]
                if len(traj) != n:
                    raise ValueError(f"group {g}, trajectory {i}: {len(traj)} anchor states for {n} step rewards")
                states.extend(traj)
        if len(states) != flat_rewards.size:
            raise ValueError(f"anchor_states has {len(states)} states for {flat_rewards.size} steps")
        step_group = np.repeat(np.arange(len(rewards)), np.diff(step_offsets[traj_offsets]))

        def place(s: int) -> str:
            i = int(np.searchsorted(step_offsets, s, side="right") - 1)
            g = int(np.searchsorted(traj_offsets, i, side="right") - 1)
            return f"group {g}, trajectory {i - int(traj_offsets[g])}, step {s - int(step_offsets[i])}"

        anchors = anchor_ids(states, step_group, place)
    per_step = {
        name: None if given is None else _nested_per_step(given, name, step_offsets, traj_offsets)
        for name, given in (("step_values", step_values), ("step_tokens", step_tokens))
    }
    return StepBatch(outcomes, traj_offsets, flat_rewards, step_offsets, anchors, None if anchor_states is None else states, **per_step)


def step_list_form_of(batched: StepBatchedEstimator, name: str | None = None, *, with_returns: bool = False) -> StepListEstimator:
    """Wrap a batched step-level estimator in the nested list form (``algorithm_config`` supplies ``norm_adv_by_std_in_grpo``).

    ``with_returns``: ``batched`` is value-based and returns ``(advantages, returns)``; the list form takes ``step_values``
    and ``step_tokens`` and returns the returns as ``returns_by_group``.
    """
    func_name = name or getattr(batched, "__name__", "estimator")
    who = f"estimator {func_name!r}"
    accepted = closed_keywords(batched)  # an unknown keyword is refused unless batched takes any (see closed_keywords)

    def list_form(
        rewards: Sequence[Any],
        step_rewards: Sequence[Any],
        anchor_states: Sequence[Any] | None = None,
        step_values: Sequence[Any] | None = None,
        step_tokens: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> tuple[list[Any], list[Any]]:
        refuse_unknown_options(func_name, kwargs, accepted)
        config = kwargs.pop("algorithm_config", None)
        traj_groups = kwargs.pop("traj_groups", None)
        lengths = kwargs.pop("lengths", None)
        source = ""
        if config is not None and "norm_adv_by_std_in_grpo" not in kwargs and hasattr(config, "norm_adv_by_std_in_grpo"):
            kwargs["norm_adv_by_std_in_grpo"], source = config.norm_adv_by_std_in_grpo, " (from algorithm_config)"
        check_call_options(func_name, kwargs, source)
        batch = batch_from_lists(rewards, step_rewards, anchor_states, step_values, step_tokens)
        if lengths is None and traj_groups is not None:
            lengths = [sum(len(step.response_ids) for step in traj.steps) for group in traj_groups for traj in group.trajectories]
        if lengths is not None:
            batch = replace(batch, lengths=lengths)
        names, var_kw = accepted_keywords(batched)
        for key, value in (("algorithm_config", config), ("traj_groups", traj_groups)):
            if value is not None and (var_kw or key in names):  # a batched form that reads them (composite hands them to its terms)
                kwargs[key] = value
        result = batched(batch, **kwargs)
        stateful = "state" in kwargs  # then the form returns (advantages, new_state)
        advantages, returns = split_step_output(result[0] if stateful else result, with_returns, batch.num_steps, who)
        nested = _nested(advantages, batch)
        out = (nested, [list(group) for group in (_nested(returns, batch) if with_returns else nested)])
        return (out, result[1]) if stateful else out  # type: ignore[return-value]

    list_form.__doc__ = batched.__doc__
    list_form.__name__ = list_form.__qualname__ = func_name
    return list_form


def step_batched_form_of(fn: StepListEstimator, name: str | None = None, *, with_returns: bool = False) -> StepBatchedEstimator:
    """Wrap a nested list-form step-level estimator so it takes a :class:`StepBatch` (its ``anchor_states``: the batch's ids).

    ``with_returns``: ``fn`` is value-based; it gets the batch's ``step_values`` and ``step_tokens`` nested, and the batched
    form returns ``(advantages, returns)``.
    """
    who = f"estimator {name or getattr(fn, '__name__', fn)!r}"

    def batched(batch: StepBatch, /, **kwargs: Any) -> Any:
        per_step = {}
        if with_returns:
            per_step = {k: None if getattr(batch, k) is None else _nested(getattr(batch, k), batch) for k in ("step_values", "step_tokens")}
        result = call_with_accepted_kwargs(
            fn,
            rewards=batch.trajectories.split(batch.outcomes),
            step_rewards=_nested(batch.step_rewards, batch),
            anchor_states=anchor_id_lists(batch),
            **per_step,
            **kwargs,
        )
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise ValueError(f"{who} must return (advantages_by_group, returns_by_group), got {type(result).__name__}")
        flat = [_flat_steps(part, batch, who) for part in (result[0], result[1])] if with_returns else [_flat_steps(result[0], batch, who)]
        return tuple(flat) if with_returns else flat[0]

    batched.__doc__ = fn.__doc__
    batched.__name__ = getattr(fn, "__name__", "estimator")
    return batched


def _flat_steps(nested: Any, batch: StepBatch, who: str) -> np.ndarray:
    """``[group][trajectory]`` per-step values ``(S,)`` flat, checked against the batch's groups, trajectories and steps."""
    groups = as_groups(nested, who)
    if len(groups) != batch.num_groups:
        raise ValueError(f"{who} returned {len(groups)} groups of advantages for {batch.num_groups} groups")
    parts = []
    sizes = np.diff(batch.step_offsets)
    for g, group in enumerate(groups):
        trajectories = as_groups(group, f"{who} (group {g})")
        first, last = int(batch.traj_offsets[g]), int(batch.traj_offsets[g + 1])
        if len(trajectories) != last - first:
            raise ValueError(f"{who} returned {len(trajectories)} trajectories for group {g} of {last - first}")
        for i, steps in enumerate(trajectories):
            part = as_advantages(steps, who)
            if part.size != sizes[first + i]:
                raise ValueError(f"{who} returned {part.size} advantages for group {g}, trajectory {i} of {sizes[first + i]} steps")
            parts.append(part)
    return np.concatenate(parts) if parts else np.zeros(0)
