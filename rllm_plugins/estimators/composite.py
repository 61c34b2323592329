"""Composite: the weighted sum of other registered estimators' advantages (e.g. TRL #7291's lam * A_grpo + (1 - lam) * A_other).

``terms`` lists ``[name, weight]`` or ``[name, weight, options]``; per step ``s`` of trajectory ``i``::

    A_s = sum_k weight_k * A^k_s      A^k_s = the step-level term's advantage of step s,
                                       or the outcome-level term's advantage of trajectory i (broadcast)

``composite`` is step level: on single-turn data each trajectory is one step, so a composite of outcome
terms gives each trajectory the weighted sum of their advantages. A term may be any registered estimator
but ``composite``, and each gets what it would get alone:

- the call's ``norm_adv_by_std_in_grpo``, ``algorithm_config`` (``pkpo`` reads ``pass_at_k``) and
  ``traj_groups``; its own options, checked as its own (ranges, group size);
- ``gamma`` (None): the discount of every term that takes one and does not set its own (verl's
  ``algorithm.gamma`` arrives here);
- the anchor states (``gigpo``), the response lengths (``opo``, ``minus_length_weighted_mean``,
  ``verl_reinforce_plus_plus_baseline``) and a state (``rae``): ``composite`` needs what its terms need
  (:func:`composite_needs`, the spec's ``needs_for``), and every path hands it over (:mod:`rllm_plugins.needs`).

State: with a stateful term, ``composite`` is called with ``state`` and returns ``(advantages, new_state)``;
its state is ``{"terms": {"<k>:<name>": state of term k}}``, each term's kept apart by index and name and
handed to it as its own. The names resolve through the registry at each call, so plugins compose too
(the registry sits below the estimators: its plugin manager imports the built-ins by name, when first asked).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..calling import (
    accepted_keywords,
    call_with_accepted_kwargs,
    check_call_options,
    closed_keywords,
    describe,
    is_finite_real,
    refuse_unknown_options,
)
from ..needs import Needs, needs_of
from ..outputs import as_advantages
from ..registry import get_estimator_spec
from ..spec import AdvEstimatorSpec
from ..state.store import call_stateful
from ..steps.batch import StepBatch
from ..steps.forms import step_list_form_of
from .step_options import check_discount

__all__ = [
    "SPECS",
    "calculate_composite_advantages",
    "check_composite_group_size",
    "check_composite_options",
    "composite",
    "composite_needs",
    "composite_terms",
]

Term = tuple[str, float, dict[str, Any]]


def composite_terms(terms: object) -> list[Term]:
    """``terms`` checked and normalised to ``[(name, weight, options)]``; ``ValueError`` names the term and the fix."""
    shape = 'a list of [name, weight] or [name, weight, {options}], e.g. [["grpo", 0.5], ["rloo", 0.5, {"epsilon": 1e-4}]]'
    if isinstance(terms, (str, bytes, Mapping)) or not isinstance(terms, Sequence) or not terms:
        raise ValueError(f"estimator 'composite': terms must be {shape}; got {type(terms).__name__} {terms!r}")
    parsed: list[Term] = []
    for k, term in enumerate(terms):
        where = f"estimator 'composite', term {k}"
        if isinstance(term, (str, bytes, Mapping)) or not isinstance(term, Sequence) or len(term) not in (2, 3):
            raise ValueError(f"{where}: must be [name, weight] or [name, weight, {{options}}], got {term!r}")
        name, weight, options = term[0], term[1], term[2] if len(term) == 3 else {}
        if not isinstance(name, str):
            raise ValueError(f"{where}: the name must be a str, got {type(name).__name__} {name!r}")
        if not is_finite_real(weight):  # an int beyond the float64 range (10**400) too
            raise ValueError(f"{where} ({name!r}): the weight must be a finite number, got {describe(weight)}")
        if not isinstance(options, Mapping):
            raise ValueError(f"{where} ({name!r}): options must be a mapping of option names to values, got {type(options).__name__} {options!r}")
        spec = get_estimator_spec(name)  # an unknown name: the registry's error lists the names
        if spec.name == "composite":
            raise ValueError(f"{where}: a composite cannot be a term; list its terms directly")
        if spec.needs_values:
            raise ValueError(
                f"{where} ({name!r}) reads a critic's value per step and gives the critic's targets, which a sum of terms cannot; use it on its own"
            )
        _check_term_options(spec, dict(options), f"{where} ({name!r}) options")
        parsed.append((spec.name, float(weight), dict(options)))
    return parsed


def _check_term_options(spec: Any, options: dict[str, Any], where: str) -> None:
    """A term's options: names it takes (closest-name hint), no framework argument, and the term's own range checks."""
    if "norm_adv_by_std_in_grpo" in options:
        raise ValueError(f"{where}: norm_adv_by_std_in_grpo is not an estimator option; the configuration's norm_adv_by_std_in_grpo applies to every term")
    try:
        refuse_unknown_options(spec.name, options, closed_keywords(spec.fn, spec.batched, declared=spec.options))
        check_call_options(spec.name, options)
        if spec.check_options is not None:
            spec.check_options(options)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def check_composite_options(options: Mapping[str, Any]) -> None:
    """Config-time check: ``terms`` is given and every term is a registered estimator with valid options; ``gamma`` in [0, 1]."""
    if options.get("gamma") is not None:
        check_discount("composite", options["gamma"])
    composite_terms(options.get("terms"))


def check_composite_group_size(options: Mapping[str, Any], group_size: int) -> None:
    """Config-time check of every term's options against the configured group size, as the term alone is checked."""
    for k, (name, _, term_options) in enumerate(composite_terms(options.get("terms"))):
        spec = get_estimator_spec(name)
        if spec.check_group_size is None:
            continue
        try:
            spec.check_group_size(term_options, group_size)
        except ValueError as e:
            raise ValueError(f"estimator 'composite', term {k} ({name!r}): {e}") from None


def composite_needs(options: Mapping[str, Any]) -> Needs:
    """What ``composite`` reads with these options: what any of its terms reads (anchor states, lengths, a state)."""
    needs = Needs()
    for name, _, term_options in composite_terms(options.get("terms")):
        needs |= needs_of(get_estimator_spec(name), term_options)
    return needs


def _term_states(state: Mapping[str, Any]) -> Mapping[str, Any]:
    """The per-term states held in composite's ``state`` (``{"terms": {"<k>:<name>": ...}}``; ``{}`` at first)."""
    held = state.get("terms", {})
    if not isinstance(held, Mapping):
        raise ValueError(f"estimator 'composite': state['terms'] must map '<index>:<name>' to each stateful term's state, got {type(held).__name__}")
    return held


def composite(
    batch: StepBatch,
    /,
    *,
    norm_adv_by_std_in_grpo: bool = True,
    terms: Any = None,
    gamma: float | None = None,
    algorithm_config: Any = None,
    traj_groups: Sequence[Any] | None = None,
    state: Mapping[str, Any] | None = None,
    task_ids: np.ndarray | None = None,
    **_: Any,
) -> Any:
    """Composite: the weighted sum of the terms' advantages ``(S,)``, outcome-level terms broadcast to their trajectory's steps.

    Called with ``state`` (a stateful term: :func:`composite_needs`), returns ``(advantages, new_state)``.
    """
    parsed = composite_terms(terms)
    out: np.ndarray | None = None
    new_states: dict[str, Any] = {}
    shared = {"norm_adv_by_std_in_grpo": norm_adv_by_std_in_grpo, "algorithm_config": algorithm_config, "traj_groups": traj_groups}
    for k, (name, weight, options) in enumerate(parsed):
        spec = get_estimator_spec(name)
        who = f"estimator 'composite', term {k} ({name!r})"
        if gamma is not None and "gamma" not in options and "gamma" in accepted_keywords(spec.batched_form)[0]:
            options = {**options, "gamma": gamma}
        needs = needs_of(spec, options)
        stepped = spec.level == "step"
        if needs.anchors and batch.anchors is None:
            raise ValueError(f"{who} reads anchor states, and this batch carries none (StepBatch.anchors); the caller must build them for composite")
        kwargs = {**shared, **options}
        if needs.lengths and not stepped:
            if batch.lengths is None:
                raise ValueError(f"{who} needs the response length of every trajectory, and this batch carries none (StepBatch.lengths)")
            kwargs["lengths"] = batch.lengths
        inputs = (batch,) if stepped else (batch.outcomes, batch.traj_offsets)
        if needs.state:
            if state is None:
                raise ValueError(f"{who} is stateful: call composite with state=(what its previous call returned, {{}} at first)")
            key = f"{k}:{name}"
            form = functools.partial(call_with_accepted_kwargs, spec.batched_form)
            result, new_states[key] = call_stateful(form, _term_states(state).get(key, {}), who, *inputs, task_ids=task_ids, **kwargs)
        else:
            result = call_with_accepted_kwargs(spec.batched_form, *inputs, **kwargs)
        advantages = as_advantages(result, who)
        expected, unit = (batch.num_steps, "steps") if stepped else (batch.num_trajectories, "trajectories")
        if advantages.size != expected:
            raise ValueError(f"{who} returned {advantages.size} advantages for {expected} {unit}")
        if weight != 1.0:  # on the trajectories before the broadcast, for an outcome term
            advantages = advantages * weight
        per_step = advantages if stepped else batch.steps.expand(advantages)
        if out is None:
            out = np.array(per_step, dtype=np.float64)  # a copy: the term's output stays its own
        else:
            out += per_step
    return out if state is None else (out, {"terms": new_states})


calculate_composite_advantages = step_list_form_of(composite, "calculate_composite_advantages")

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (
    AdvEstimatorSpec(
        "composite",
        calculate_composite_advantages,
        composite,
        options=(),
        level="step",
        check_options=check_composite_options,
        check_group_size=check_composite_group_size,
        needs_for=composite_needs,
    ),
)
