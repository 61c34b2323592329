"""Running every rule on synthetic cases and reporting: :func:`check_estimator`, :func:`assert_estimator_contract`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np

from ..needs import needs_of
from ..registry import get_estimator
from ..spec import AdvEstimatorSpec
from ..trial import step_level_hint
from .calls import Case, subject_of
from .rules import ALL_RULES, NOT_APPLICABLE, RULES, options_matter
from .shrinker import shrink

__all__ = ["ContractReport", "Violation", "assert_estimator_contract", "check_estimator", "synthetic_cases"]


@dataclass(frozen=True)
class Violation:
    """One broken rule, with the smallest failing input found."""

    rule: str
    message: str
    example: Any  # a Case (a StepCase for step-level estimators)

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}\n    minimal failing example: {self.example}"


@dataclass
class ContractReport:
    """Verdict of every rule (``pass``, ``FAIL`` or ``skipped: why``) and the violations."""

    estimator: str
    verdicts: dict[str, str] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    rules: Mapping[str, str] = field(default_factory=lambda: dict(RULES))  # name -> what it demands, in checking order

    @property
    def ok(self) -> bool:
        return not self.violations

    def verdict(self, rule: str) -> tuple[str, str]:
        """``(status, reason)`` of one rule: status ``pass``, ``FAIL``, ``skipped`` or ``not run``; the reason of a skip, else ``""``."""
        status, _, reason = self.verdicts.get(rule, "not run").partition(": ")
        return status, reason

    def as_dict(self) -> dict[str, Any]:
        """The report as plain data (``rllm-plugins check --json``)."""
        rules = []
        for rule, description in self.rules.items():
            status, reason = self.verdict(rule)
            rules.append({"rule": rule, "status": status, "reason": reason, "description": description})
        violations = [{"rule": v.rule, "message": v.message, "example": str(v.example)} for v in self.violations]
        return {"estimator": self.estimator, "ok": self.ok, "rules": rules, "violations": violations}

    def __str__(self) -> str:
        width = max(map(len, self.rules))
        verdicts = {rule: self.verdict(rule) for rule in self.rules}
        status_width = max(len(status) for status, _ in verdicts.values())
        lines = [f"contract of estimator {self.estimator}: {'OK' if self.ok else f'{len(self.violations)} violation(s)'}"]
        for rule, (status, reason) in verdicts.items():
            lines.append(f"  {rule:<{width}}  {status:<{status_width}}  {self.rules[rule]}" + (f" (skipped: {reason})" if reason else ""))
        shown: dict[str, str] = {}  # each minimal failing example printed once
        for v in self.violations:
            example = str(v.example)
            if example in shown:
                lines.append(f"{v.rule}: {v.message}\n    minimal failing example: as for {shown[example]}")
            else:
                shown[example] = v.rule
                lines.append(str(v))
        return "\n".join(lines)


def synthetic_cases(seed: int) -> list[Case]:
    """Synthetic inputs: binary, continuous, constant, extreme-magnitude rewards; groups of one; one group; an empty group; none."""
    rng = np.random.default_rng(seed)

    def case(sizes: Sequence[int], draw: Callable[[int], np.ndarray]) -> Case:
        rewards = tuple(tuple(float(x) for x in draw(n)) for n in sizes)
        lengths = tuple(tuple(int(x) for x in rng.integers(1, 50, n)) for n in sizes)
        return Case(rewards, lengths)

    def extreme(n: int) -> np.ndarray:
        return rng.choice([-1.0, 1.0], n) * rng.choice([1e30, 1e-30, 1.0, 1e15], n) * rng.uniform(0.5, 1.5, n)

    def constant(n: int) -> np.ndarray:
        return np.full(n, float(rng.integers(-3, 4)))

    sizes = [rng.integers(2, 9, rng.integers(2, 6)).tolist() for _ in range(3)]
    return [
        case([2, 3], lambda n: rng.normal(size=n)),
        *(case(s, lambda n: rng.integers(0, 2, n).astype(float)) for s in sizes),
        *(case(s, lambda n: rng.normal(0.0, 10.0, n)) for s in sizes),
        case([4, 4, 4, 4], lambda n: rng.normal(size=n)),
        case([3, 5], constant),
        case([4, 3, 6], extreme),
        case([1, 1, 1], lambda n: rng.normal(size=n)),
        case([1, 4, 1, 3], lambda n: rng.integers(0, 2, n).astype(float)),
        case([1], lambda n: rng.normal(size=n)),
        case([6], lambda n: rng.normal(size=n)),
        case([5], lambda n: rng.integers(0, 2, n).astype(float)),
        case([3, 0, 2], lambda n: rng.normal(size=n)),
        Case((), ()),
    ]


def check_estimator(name_or_fn: Any, *, seed: int = 0, options: Mapping[str, Any] | None = None) -> ContractReport:
    """Check an estimator against every contract rule; never raises for a misbehaving estimator.

    ``name_or_fn`` is a registered name (str or ``rLLMAdvantageEstimator``), an
    :class:`AdvEstimatorSpec`, or a list-form function ``fn(rewards, **kw) -> (advantages, returns)``.
    ``seed`` picks the synthetic inputs; ``options`` are passed to every call (an estimator that needs
    some, as ``composite`` its ``terms``). Unknown names raise ``ValueError`` from the registry.
    """
    subject = subject_of(name_or_fn)
    if options:
        bound = dict(options)
        label = f"{subject.label} with {bound!r}"
        subject = replace(
            subject,
            label=label,
            list_form=partial(subject.list_form, **bound),
            batched_form=partial(subject.batched_form, **bound),
            options={**subject.options, **{k: v for k, v in bound.items() if k in subject.options}},  # varied from the values given
        )
    if subject.level == "step":
        from .step_contract import STEP_RULES, bind_needs, check_step_rules  # only for step-level estimators

        if isinstance(name_or_fn, AdvEstimatorSpec) or not callable(name_or_fn):  # called as the paths call it with these options
            spec = name_or_fn if isinstance(name_or_fn, AdvEstimatorSpec) else get_estimator(name_or_fn).spec
            needs = needs_of(spec, options)
            if needs.lengths or needs.state or needs.anchors != spec.needs_anchors:
                subject = bind_needs(subject, needs)

        verdicts, found = check_step_rules(subject, seed)
        violations = [Violation(rule, message, example) for rule, message, example in found]
        return ContractReport(f"{subject.label} (step-level)", verdicts, violations, {name: text for name, (text, _) in STEP_RULES.items()})
    cases = synthetic_cases(seed)
    stateful = subject.stateful
    if stateful:  # the outcome rules with the state held fixed, then the rules of the state itself
        from .state_contract import STATE_RULES, bind_state, check_state_rules, warm_state

        state = warm_state(subject)
        state_verdicts, state_found = check_state_rules(subject, cases, state)
        subject = bind_state(subject, state)
    report = ContractReport(subject.label + (" (stateful)" if stateful else ""))
    hint = step_level_hint(subject.list_form, subject.batched_form)
    for rule in ALL_RULES:
        if rule.name == "group_order_invariant" and not subject.group_order_invariant:
            report.verdicts[rule.name] = "skipped: declared group_order_invariant=False"
            continue
        if rule.name == "permutation_equivariant" and stateful and not subject.group_order_invariant:
            report.verdicts[rule.name] = "skipped: stateful with group_order_invariant=False (the scan order of trajectories matters)"
            continue
        if rule.compares and report.verdicts.get("deterministic") == "FAIL":
            report.verdicts[rule.name] = "skipped: not deterministic"
            continue
        applicable = 0
        for case in filter(rule.applies, cases):
            message = rule.judge(subject, case, seed)
            applicable += message != NOT_APPLICABLE
            if message:
                example, message = shrink(rule, subject, case, message, seed)
                report.violations.append(Violation(rule.name, message + (hint if "TypeError" in message else ""), example))
                report.verdicts[rule.name] = "FAIL"
                break
        else:
            report.verdicts[rule.name] = "pass" if applicable else "skipped: no usable output (see the other rules)"
    if report.verdicts.get("deterministic") == "FAIL":
        report.verdicts["options_matter"] = "skipped: not deterministic"
    else:
        message, example = options_matter(subject, cases)
        report.verdicts["options_matter"] = "FAIL" if message else "pass"
        if message:
            report.violations.append(Violation("options_matter", message, example))
    if stateful:
        report.rules = {**report.rules, **STATE_RULES}
        report.verdicts.update(state_verdicts)
        report.violations += [Violation(rule, message, example) for rule, message, example in state_found]
    return report


def assert_estimator_contract(name_or_fn: Any, *, seed: int = 0, options: Mapping[str, Any] | None = None) -> ContractReport:
    """Raise ``AssertionError`` with the report if the estimator breaks any contract rule; else return the report."""
    report = check_estimator(name_or_fn, seed=seed, options=options)
    if not report.ok:
        raise AssertionError(str(report))
    return report
