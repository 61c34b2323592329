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

__all__ = ["anchor_id_lists", "batch_from_lists", "step_batched_form_of", "step_list_form_of"]

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


def batch_from_lists(rewards: Sequence[Any], step_rewards: Sequence[Any], anchor_states: Sequence[Any] | None) -> StepBatch:
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
    step_values = np.concatenate(per_traj) if per_traj else np.zeros(0)
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
        if len(states) != step_values.size:
            raise ValueError(f"anchor_states has {len(states)} states for {step_values.size} steps")
        step_group = np.repeat(np.arange(len(rewards)), np.diff(step_offsets[traj_offsets]))

        def place(s: int) -> str:
            i = int(np.searchsorted(step_offsets, s, side="right") - 1)
            g = int(np.searchsorted(traj_offsets, i, side="right") - 1)
            return f"group {g}, trajectory {i - int(traj_offsets[g])}, step {s - int(step_offsets[i])}"

        anchors = anchor_ids(states, step_group, place)
    return StepBatch(outcomes, traj_offsets, step_values, step_offsets, anchors, None if anchor_states is None else states)


def step_list_form_of(batched: StepBatchedEstimator, name: str | None = None) -> StepListEstimator:
    """Wrap a batched step-level estimator in the nested list form (``algorithm_config`` supplies ``norm_adv_by_std_in_grpo``)."""
    func_name = name or getattr(batched, "__name__", "estimator")
    who = f"estimator {func_name!r}"
    accepted = closed_keywords(batched)  # an unknown keyword is refused unless batched takes any (see closed_keywords)

    def list_form(
        rewards: Sequence[Any], step_rewards: Sequence[Any], anchor_states: Sequence[Any] | None = None, **kwargs: Any
    ) -> tuple[list[Any], list[Any]]:
        refuse_unknown_options(func_name, kwargs, accepted)
        config = kwargs.pop("algorithm_config", None)
        traj_groups = kwargs.pop("traj_groups", None)
        lengths = kwargs.pop("lengths", None)
        source = ""
        if config is not None and "norm_adv_by_std_in_grpo" not in kwargs and hasattr(config, "norm_adv_by_std_in_grpo"):
            kwargs["norm_adv_by_std_in_grpo"], source = config.norm_adv_by_std_in_grpo, " (from algorithm_config)"
        check_call_options(func_name, kwargs, source)
        batch = batch_from_lists(rewards, step_rewards, anchor_states)
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
        advantages = as_advantages(result[0] if stateful else result, who)
        if advantages.size != batch.num_steps:
            raise ValueError(f"{who} returned {advantages.size} advantages for {batch.num_steps} steps")
        nested = _nested(advantages, batch)
        out = (nested, [list(group) for group in nested])
        return (out, result[1]) if stateful else out  # type: ignore[return-value]

    list_form.__doc__ = batched.__doc__
    list_form.__name__ = list_form.__qualname__ = func_name
    return list_form


def step_batched_form_of(fn: StepListEstimator, name: str | None = None) -> StepBatchedEstimator:
    """Wrap a nested list-form step-level estimator so it takes a :class:`StepBatch` (its ``anchor_states``: the batch's ids)."""
    who = f"estimator {name or getattr(fn, '__name__', fn)!r}"

    def batched(batch: StepBatch, /, **kwargs: Any) -> np.ndarray:
        result = call_with_accepted_kwargs(
            fn,
            rewards=batch.trajectories.split(batch.outcomes),
            step_rewards=_nested(batch.step_rewards, batch),
            anchor_states=anchor_id_lists(batch),
            **kwargs,
        )
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise ValueError(f"{who} must return (advantages_by_group, returns_by_group), got {type(result).__name__}")
        groups = as_groups(result[0], who)
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

    batched.__doc__ = fn.__doc__
    batched.__name__ = getattr(fn, "__name__", "estimator")
    return batched
