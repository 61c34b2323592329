"""What an estimator reads beyond the rewards, for the options it is called with: anchor states, response lengths, a state.

Most estimators declare it once in their spec: ``needs_anchors``, a ``lengths`` parameter, ``stateful``. One
whose needs follow its options (``composite``: what its terms need) gives ``AdvEstimatorSpec.needs_for``.
Every path (the collector, the list forms, the adapters, the config checks) asks :func:`needs_of` with the
options it will call the estimator with, and hands over what the answer names:

- ``anchors``: each step's anchor state (:attr:`~rllm_plugins.steps.StepBatch.anchors`, and the states);
- ``lengths``: each trajectory's response tokens, ``(N,)`` float64 (``lengths=`` for an outcome-level form,
  :attr:`~rllm_plugins.steps.StepBatch.lengths` for a step-level one);
- ``state``: the estimator's state across calls; the form then takes ``state`` (and ``task_ids``) and
  returns ``(result, new_state)`` (:mod:`.state`);
- ``values``: a critic's value per step, for a spec that declares ``needs_values`` (the paths supply the values).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .calling import accepted_keywords

__all__ = ["Needs", "needs_of"]


@dataclass(frozen=True)
class Needs:
    """What one call of an estimator reads beyond the rewards (see the module docstring)."""

    anchors: bool = False
    lengths: bool = False
    state: bool = False
    values: bool = False

    def __or__(self, other: Needs) -> Needs:
        return Needs(self.anchors or other.anchors, self.lengths or other.lengths, self.state or other.state, self.values or other.values)


def needs_of(spec: Any, options: Mapping[str, Any] | None = None) -> Needs:
    """What ``spec`` (an :class:`~rllm_plugins.spec.AdvEstimatorSpec`) reads when called with ``options``.

    Its declared flags (``needs_anchors``, ``stateful``, ``needs_values``, a form naming ``lengths``), joined with what its
    ``needs_for(options)`` says; a ``ValueError`` of ``needs_for`` (bad options) propagates.
    """
    form = spec.batched if spec.batched is not None else spec.fn
    lengths = "lengths" in accepted_keywords(form)[0]
    declared = Needs(anchors=spec.needs_anchors, lengths=lengths, state=spec.stateful, values=spec.needs_values)
    if spec.needs_for is None:
        return declared
    extra = spec.needs_for(dict(options or {}))
    if not isinstance(extra, Needs):
        raise ValueError(f"estimator {spec.name!r}: needs_for must return a rllm_plugins.needs.Needs, got {type(extra).__name__} {extra!r}")
    return declared | extra
