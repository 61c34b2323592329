"""A trial call of a selected estimator on two tiny task groups, so that a broken plugin fails when a config is built.

The trial is what the adapters do at every step, on 4 trajectories (7 steps for a step-level
estimator): the batched form with the user's options, its output checked for shape and finiteness.
It changes no number: built-in estimators are pure functions of their input, a stateful one is
tried from a fresh state that is then dropped, and the trial's output is dropped. :func:`step_level_hint` says when an outcome-level estimator's signature is a
step-level one (a plugin registered without ``level="step"``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from .steps.batch import StepBatch

if TYPE_CHECKING:
    from .spec import Estimator

__all__ = ["step_level_hint", "trial_run"]

_STEP_PARAMETERS = ("step_rewards", "anchor_states")


def step_level_hint(*forms: Callable[..., Any] | None) -> str:
    """A hint when a form's signature is step-level (``step_rewards`` / ``anchor_states``, or one ``StepBatch``); else ``""``."""
    for form in forms:
        try:
            params = list(inspect.signature(form).parameters.values()) if form is not None else []
        except (TypeError, ValueError):
            continue
        named = [p.name for p in params if p.name in _STEP_PARAMETERS]
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
        one_batch = len(positional) == 1 and ("StepBatch" in str(positional[0].annotation) or positional[0].name == "batch")
        if named or one_batch:
            what = f"takes {', '.join(named)}" if named else f"takes one {positional[0].name} (a StepBatch)"
            return f"; its signature {what}, a step-level estimator's: declare level='step' (AdvEstimatorSpec or @register_rllm_adv_estimator)"
    return ""


def _tiny_step_batch(with_anchors: bool, with_values: bool) -> StepBatch:
    """Two task groups of two trajectories, 1 to 3 steps each; anchors (ids and the text states they stand for) repeat within a group;
    with values, a critic's value and model tokens per step."""
    anchors = np.array([0, 1, 0, 2, 3, 2, 3]) if with_anchors else None
    states = ["start", "door", "start", "start", "hall", "start", "hall"] if with_anchors else None
    rewards = np.array([0.0, 1.0, 0.0, 0.5, 0.0, 0.25, 0.0])
    values = np.array([0.5, 0.75, 0.25, 0.5, 0.25, 0.5, 0.0]) if with_values else None
    tokens = np.array([3.0, 2.0, 4.0, 1.0, 2.0, 5.0, 1.0]) if with_values else None
    return StepBatch(
        np.array([1.0, 0.0, 0.5, 0.25]), np.array([0, 2, 4]), rewards, np.array([0, 2, 3, 5, 7]), anchors, states, step_values=values, step_tokens=tokens
    )


def trial_run(name: str, estimator: Estimator, options: Mapping[str, Any], *, norm_adv_by_std_in_grpo: bool, where: str) -> None:
    """Run ``estimator`` (selected as ``name``) once on tiny groups with ``options``, through the run every driver calls
    (:func:`.run.run_outcome`, :func:`.run.run_steps`: from a fresh state, the new one dropped); ``ValueError`` naming
    ``where``, the estimator and what went wrong."""
    from .run import Call, Wording, run_outcome, run_steps  # only when a configuration is checked

    spec = estimator.spec
    who = f"{where}: estimator {name!r} ({estimator.provider}) failed a trial on two tiny groups"
    units = "steps" if spec.level == "step" else "trajectories"
    wording = Wording(
        lambda given, expected: f"{who}: it returned {given} advantages for {expected} {units}",
        lambda values, what: f"{who}: it returned the non-finite {what} {values[~np.isfinite(values)][0]}",
    )
    task_ids = np.array(["p", "p", "q", "q"], dtype=object)
    try:
        call = Call(estimator, {**options, "norm_adv_by_std_in_grpo": norm_adv_by_std_in_grpo}, "the estimator", accepted_only=True)
        if spec.level == "step":
            batch = _tiny_step_batch(call.needs.anchors, call.needs.values)
            if call.needs.lengths:
                batch = replace(batch, lengths=np.array([3.0, 5.0, 2.0, 4.0]))
            run_steps(call, batch, wording=wording, role="trial", task_ids=task_ids)
        else:
            values, offsets, lengths = np.array([1.0, 0.0, 0.5, 0.25]), np.array([0, 2, 4]), np.array([3.0, 5.0, 2.0, 4.0])
            run_outcome(call, values, offsets, wording=wording, role="trial", lengths=lengths, task_ids=task_ids)
    except ValueError as e:
        if str(e).startswith(who):  # the run's own check of the output, worded above
            raise
        raise ValueError(f"{who}: ValueError: {e}{step_level_hint(spec.fn, spec.batched) if spec.level == 'outcome' else ''}") from None
    except Exception as e:
        raise ValueError(f"{who}: {type(e).__name__}: {e}{step_level_hint(spec.fn, spec.batched) if spec.level == 'outcome' else ''}") from None
