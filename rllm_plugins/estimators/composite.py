"""Composite: the weighted sum of other registered estimators' advantages (e.g. TRL #7291's lam * A_grpo + (1 - lam) * A_other).

``terms`` lists ``[name, weight]`` or ``[name, weight, options]``; per step ``s`` of trajectory ``i``::

    A_s = sum_k weight_k * A^k_s      A^k_s = the step-level term's advantage of step s,
                                       or the outcome-level term's advantage of trajectory i (broadcast)

``composite`` is step level: on single-turn data each trajectory is one step, so a composite of outcome
terms gives each trajectory the weighted sum of their advantages. Each term runs with the call's
``norm_adv_by_std_in_grpo`` and its own options; a term that reads anchor states (``gigpo``) is refused,
as ``composite`` declares none. ``gamma`` (None) is the discount of every term that takes one and does not
set its own (verl's ``algorithm.gamma`` arrives here). The names resolve through the registry at each call, so plugins compose too
(the registry sits below the estimators: its plugin manager imports the built-ins by name, when first asked).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..calling import accepted_keywords, call_with_accepted_kwargs, check_call_options, closed_keywords, describe, is_finite_real, refuse_unknown_options
from ..outputs import as_advantages
from ..registry import get_estimator_spec
from ..steps.batch import StepBatch
from ..steps.forms import step_list_form_of
from .gigpo import check_discount

__all__ = ["calculate_composite_advantages", "check_composite_options", "composite", "composite_terms"]

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
        if not is_finite_real(weight):
            raise ValueError(f"{where} ({name!r}): the weight must be a finite number, got {describe(weight)}")
        if not isinstance(options, Mapping):
            raise ValueError(f"{where} ({name!r}): options must be a mapping of option names to values, got {type(options).__name__} {options!r}")
        spec = get_estimator_spec(name)  # an unknown name: the registry's error lists the names
        if spec.name == "composite":
            raise ValueError(f"{where}: a composite cannot be a term; list its terms directly")
        if spec.needs_anchors:
            raise ValueError(
                f"{where} ({name!r}) reads anchor states, which a composite is not given; combine it by its options instead "
                "(gigpo's step_advantage_w) or use turn_grpo / step_reinforce as the step-level term"
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


def composite(batch: StepBatch, /, *, norm_adv_by_std_in_grpo: bool = True, terms: Any = None, gamma: float | None = None, **_: Any) -> np.ndarray:
    """Composite: the weighted sum of the terms' advantages, outcome-level terms broadcast to their trajectory's steps."""
    out = np.zeros(batch.num_steps)
    for name, weight, options in composite_terms(terms):
        spec = get_estimator_spec(name)
        who = f"estimator 'composite', term {name!r}"
        if gamma is not None and "gamma" not in options and "gamma" in accepted_keywords(spec.batched_form)[0]:
            options = {**options, "gamma": gamma}
        stepped = spec.level == "step"
        inputs = (batch,) if stepped else (batch.outcomes, batch.traj_offsets)
        advantages = as_advantages(call_with_accepted_kwargs(spec.batched_form, *inputs, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, **options), who)
        expected, unit = (batch.num_steps, "steps") if stepped else (batch.num_trajectories, "trajectories")
        if advantages.size != expected:
            raise ValueError(f"{who} returned {advantages.size} advantages for {expected} {unit}")
        out += weight * (advantages if stepped else batch.steps.expand(advantages))
    return out


calculate_composite_advantages = step_list_form_of(composite, "calculate_composite_advantages")
