"""The transform stage of an estimator's run: the unit part of a chain applied to the advantages the run just checked.

Every driver hands its :class:`Transforms` to :func:`rllm_plugins.run.run_outcome` or :func:`~rllm_plugins.run.run_steps`
(the collector, TRL's outcome and turn paths, verl's ``rllm_*`` names), so one unit (trajectory, session or step) is
transformed the same way on every path; the run gives :meth:`Transforms.apply` its units in group order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..segments import offsets_from_sizes
from .apply import apply_transforms

__all__ = ["PER_UNIT", "Transforms"]


PER_UNIT = ("rewards", "scores", "lengths", "mean_logprobs", "turn_index")  # the context keywords that hold one value per unit


@dataclass
class Transforms:
    """The advantage transforms a run applies to the advantages it checked, and their metrics.

    ``selected``: the resolved entries (:class:`~rllm_plugins.transforms.SelectedTransform`); ``where``: the config field
    errors name. ``context``: the driver's keywords of :data:`~rllm_plugins.transform_spec.CONTEXT_KEYWORDS`, those of
    :data:`PER_UNIT` one value per unit of the run (its rows at the outcome level, its steps at the step level); the run
    adds ``offsets`` and ``traj_offsets`` and, where the driver gives none, ``rewards`` and ``scores`` (its 1-D values, or
    the step rewards) and ``turn_index``; a driver whose rewards may be shaped gives ``scores`` itself (None where it has
    none). ``parts``: ``(role, groups, units)`` transformed each on its own under its role's name,
    ``groups`` ``(G,)`` bool the run's groups in the part and ``units`` ``(N,)`` bool its units (None: all); by default
    one part, the run's role and everything. Units outside every part keep their advantages. ``metrics``: filled by
    the run, each transform's (``transform/{role}/{label}/...``).
    """

    selected: Sequence[Any]
    where: str
    context: Mapping[str, Any] = field(default_factory=dict)
    parts: Sequence[tuple[str, np.ndarray | None, np.ndarray | None]] | None = None
    metrics: dict[str, float] = field(default_factory=dict)

    def apply(self, advantages: np.ndarray, group_sizes: np.ndarray, traj_sizes: np.ndarray, run_context: Mapping[str, Any], role: str) -> np.ndarray:
        """``advantages`` ``(N,)`` (units in group order: ``group_sizes`` ``(G,)`` units per group, ``traj_sizes`` per trajectory)
        after the transforms, part by part; a fresh array."""
        out = np.array(advantages, dtype=np.float64)
        n = out.size
        group_of = np.repeat(np.arange(group_sizes.size), group_sizes)
        traj_of = np.repeat(np.arange(traj_sizes.size), traj_sizes)
        context = {**run_context, **self.context}
        for key in PER_UNIT:
            if context.get(key) is not None and np.shape(context[key])[:1] != (n,):
                raise ValueError(f"{self.where}: the context {key!r} has shape {np.shape(context[key])} for {n} units (one value per unit)")
        for part_role, groups, units in self.parts if self.parts is not None else [(role, None, None)]:
            in_groups = np.ones(group_sizes.size, dtype=bool) if groups is None else np.asarray(groups, dtype=bool)
            chosen = in_groups[group_of] & (np.ones(n, dtype=bool) if units is None else np.asarray(units, dtype=bool))
            if not chosen.any():
                continue
            per_traj = np.bincount(traj_of[chosen], minlength=traj_sizes.size)
            given = {k: (np.asarray(v)[chosen] if k in PER_UNIT else v) for k, v in context.items() if v is not None}
            given["offsets"] = offsets_from_sizes(np.bincount(group_of[chosen], minlength=group_sizes.size)[in_groups])
            given["traj_offsets"] = offsets_from_sizes(per_traj[per_traj > 0])
            out[chosen], metrics = apply_transforms(out[chosen], self.selected, role=part_role, where=self.where, **given)
            self.metrics.update(metrics)
        return out
