"""The shaping stage of an estimator's run: the rewards a run's estimator sees, from the rewards the driver gathered.

Every driver hands its :class:`Shapers` to :func:`rllm_plugins.run.run_outcome` or :func:`~rllm_plugins.run.run_steps`
(the collector, TRL's outcome and turn paths, verl's ``rllm_*`` names and verl's own estimators), so one unit
(trajectory or session) is shaped the same way on every path, before the estimator and before the transforms.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..segments import offsets_from_sizes
from .terms import shape_selected

__all__ = ["PER_UNIT", "Shapers"]

PER_UNIT = ("scores", "lengths", "input_lengths", "tool_lengths", "turns")  # the context keywords that hold one value per unit


@dataclass
class Shapers:
    """The reward shapers a run applies to its units' rewards, and their metrics.

    ``selected``: the resolved entries (:class:`~rllm_plugins.shaping.entries.SelectedShaper`); ``where``: the config field
    errors name. ``context``: the driver's keywords of :data:`~rllm_plugins.shaper_spec.SHAPER_CONTEXT`, those of
    :data:`PER_UNIT` one value per unit of the run in its order (None: the driver has none); ``scores`` defaults to the
    rewards. ``metrics``: filled by :meth:`shape` (``shaping/{role}/...``); ``terms``: each term of the last call by label.
    """

    selected: Sequence[Any]
    where: str
    context: Mapping[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    terms: dict[str, np.ndarray] = field(default_factory=dict)

    def shape(self, rewards: np.ndarray, offsets: np.ndarray, role: str, live: np.ndarray | None = None) -> np.ndarray:
        """``rewards`` ``(N,)`` (units in groups ``offsets`` ``(G + 1,)``) plus their terms; a fresh array. ``live`` ``(N,)`` bool:
        only those units are shaped and seen by the shapers (a group left empty is dropped); the others keep their rewards."""
        values = np.array(rewards, dtype=np.float64)
        n = values.size
        context = {key: value for key, value in self.context.items() if value is not None}
        for key in PER_UNIT:
            if key in context and np.shape(context[key]) != (n,):
                raise ValueError(f"{self.where}: the context {key!r} has shape {np.shape(context[key])} for {n} units (one value per unit)")
        context.setdefault("scores", values)
        if live is not None and not live.all():
            group_of = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
            sizes = np.bincount(group_of[live], minlength=offsets.size - 1)
            context = {k: (np.asarray(v)[live] if k in PER_UNIT else v) for k, v in context.items()}
            offsets = offsets_from_sizes(sizes[sizes > 0])
            shaped, terms, metrics = shape_selected(values[live], self.selected, role=role, where=self.where, offsets=offsets, **context)
            self.metrics.update(metrics)
            values[live] = shaped
            self.terms = {label: _scattered(term, live) for label, term in terms.items()}
            return values
        shaped, self.terms, metrics = shape_selected(values, self.selected, role=role, where=self.where, offsets=offsets, **context)
        self.metrics.update(metrics)
        return shaped


def _scattered(term: np.ndarray, live: np.ndarray) -> np.ndarray:
    out = np.zeros(live.size)
    out[live] = term
    return out
