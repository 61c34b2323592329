"""The contract of a reward shaper, checked on synthetic groups (``rllm-plugins check NAME`` for a shaper's name).

The inputs are those the paths hand a shaper: task groups of every size from 1 to 8, an empty group first, in the middle
and last, units without a model token (``lengths`` 0), binary and graded rewards. Rules, one line each in the report:

- **group sizes 1-8**, **empty groups**, **units without model tokens**: the shaper runs on those inputs; an empty group
  changes no unit's term (the same input without it gives the same);
- **terms**: one array of one number per unit, or a mapping of named ones (a non-empty name without ``/``);
- **finite**: every term is finite; **precision**: no term in float16 or bfloat16;
- **no mutation**: the rewards and the context arrays are left unchanged (the check hands over writable copies);
- **deterministic**: the same input twice gives the identical terms.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..shaper_spec import shaper_context
from ..transforms.contract import TransformReport
from ..transforms.entries import narrow_dtype
from .entries import resolve_shapers, trial_shaper_context

__all__ = ["SHAPER_RULES", "ShaperReport", "check_shaper"]

SHAPER_RULES: Mapping[str, str] = {
    "group sizes 1-8": "runs on task groups of every size from 1 to 8",
    "empty groups": "runs with an empty group first, in the middle and last; an empty group changes no unit's term",
    "units without model tokens": "runs with units of lengths 0 among the others",
    "terms": "one array of one number per unit, or a mapping of named ones (a non-empty name without '/')",
    "finite": "every term is finite",
    "precision": "no term in float16 or bfloat16",
    "no mutation": "the rewards and the context arrays are left unchanged",
    "deterministic": "the same input twice gives the identical terms",
}
"""Every rule the check reports, with what it demands."""


class ShaperReport(TransformReport):
    """Each rule's verdict: ``(rule, ok, detail)``, for a reward shaper."""

    def as_dict(self) -> dict[str, Any]:
        return {"shaper": self.name, "ok": self.ok, "rules": [{"rule": r, "ok": ok, "detail": d} for r, ok, d in self.results]}

    def __str__(self) -> str:
        return "reward shaper" + super().__str__().removeprefix("advantage transform")


@dataclass(frozen=True)
class _Case:
    label: str
    rule: str
    rewards: np.ndarray
    context: dict[str, Any]


def _case(rng: np.random.Generator, label: str, rule: str, sizes: tuple[int, ...], tokenless: int = 0, graded: bool = False) -> _Case:
    n = sum(sizes)
    lengths = rng.integers(1, 200, n).astype(np.float64)
    lengths[rng.permutation(n)[:tokenless]] = 0.0
    rewards = rng.choice([0.0, 0.25, 0.5, 1.0], n) if graded else rng.integers(0, 2, n).astype(np.float64)
    context = {
        "offsets": np.cumsum([0, *sizes]).astype(np.int64),
        "scores": rewards.copy(),
        "lengths": lengths,
        "input_lengths": rng.integers(1, 50, n).astype(np.float64),
        "tool_lengths": np.where(lengths > 0, rng.integers(0, 40, n), 0).astype(np.float64),
        "turns": np.where(lengths > 0, rng.integers(1, 6, n), 0).astype(np.float64),
        "role": "all_groups",
    }
    return _Case(label, rule, rewards, context)


def _cases(rng: np.random.Generator) -> list[_Case]:
    every = tuple(int(s) for s in rng.permutation(np.arange(1, 9)))
    return [
        _case(rng, f"groups of sizes {list(every)}", "group sizes 1-8", every),
        _case(rng, f"groups of sizes {list(every)}, graded rewards", "group sizes 1-8", every, graded=True),
        *(_case(rng, f"groups of size {s} only", "group sizes 1-8", (s,) * 3) for s in (1, 2)),
        _case(rng, "an empty group first (sizes [0, 3, 2])", "empty groups", (0, 3, 2)),
        _case(rng, "an empty group in the middle (sizes [2, 0, 4])", "empty groups", (2, 0, 4)),
        _case(rng, "an empty group last (sizes [2, 2, 0])", "empty groups", (2, 2, 0)),
        _case(rng, "units without model tokens (sizes [3, 4, 2], 3 of lengths 0)", "units without model tokens", (3, 4, 2), tokenless=3),
        _case(rng, "a group whose units all lack model tokens (sizes [2, 3])", "units without model tokens", (2, 3), tokenless=2),
    ]


def _as_terms(result: Any, n: int, label: str) -> tuple[dict[str, np.ndarray] | None, str, str]:
    """``(terms, rule, problem)``: the output as terms by name, or the rule it breaks and how."""
    named = result.items() if isinstance(result, Mapping) else [("", result)]
    terms: dict[str, np.ndarray] = {}
    for key, value in named:
        if key != "" and (not isinstance(key, str) or not key or "/" in key):
            return None, "terms", f"a term named {key!r} on {label}"
        narrow = narrow_dtype(value)
        if narrow is not None and "float16" in narrow:
            return None, "precision", f"the term {key or '(unnamed)'!r} in {narrow} on {label}"
        try:
            kind = np.asarray(value).dtype.kind
            term = np.array(value, dtype=np.float64)
        except (TypeError, ValueError):
            kind, term = "O", np.zeros(0)
        if kind not in "biuf" or term.shape != (n,):
            return None, "terms", f"returned {type(value).__name__} of shape {np.shape(value)} for {n} units on {label}"
        terms[key] = term
    return terms, "", ""


def _without_empty_groups(context: dict[str, Any]) -> dict[str, Any]:
    offsets = context["offsets"]
    return {**context, "offsets": np.concatenate([offsets[:1], offsets[1:][np.diff(offsets) > 0]])}


def check_shaper(name: str, options: Mapping[str, Any] | None = None, seed: int = 0) -> ShaperReport:
    """Run the contract rules on shaper ``name`` with ``options``; unknown names and options, and option values the shaper
    refuses on a small input, raise ``ValueError``. Every other misbehaviour is a failing rule of the report."""
    (choice,) = resolve_shapers([{"name": name, **(options or {})}], "rllm-plugins check", trial=False)
    spec = choice.shaper.spec
    try:
        spec.fn(np.array([1.0, 0.0, 0.5, 0.25]), **choice.options, **{k: v for k, v in trial_shaper_context().items() if k in shaper_context(spec)})
    except (ValueError, TypeError) as e:  # option values it refuses: as at config time
        raise ValueError(
            f"rllm-plugins check: reward shaper {spec.name!r} ({choice.shaper.provider}) fails on a small input with the options {dict(choice.options)}: {e}"
        ) from None
    named = shaper_context(spec)
    problems: dict[str, str] = {}

    def call(rewards: np.ndarray, context: Mapping[str, Any]) -> Any:
        return spec.fn(rewards, **choice.options, **{k: v for k, v in context.items() if k in named})

    for case in _cases(np.random.default_rng(seed)):
        rewards, context = case.rewards.copy(), copy.deepcopy(case.context)
        try:
            result = call(rewards, context)
        except Exception as e:  # a shaper that raises on an input the paths hand it: a finding, not an error of the check
            problems.setdefault(case.rule, f"raised {type(e).__name__}: {e} on {case.label}")
            continue
        terms, rule, problem = _as_terms(result, case.rewards.size, case.label)
        if terms is None:
            problems.setdefault(rule, problem)
            continue
        if not all(np.isfinite(t).all() for t in terms.values()):
            problems.setdefault("finite", f"a non-finite term on {case.label}")
        if not np.array_equal(rewards, case.rewards):
            problems.setdefault("no mutation", f"the shaper changed its input rewards on {case.label}")
        changed = sorted(k for k in named if k in case.context and isinstance(case.context[k], np.ndarray) and not np.array_equal(context[k], case.context[k]))
        if changed:
            problems.setdefault("no mutation", f"the shaper changed its context {changed} on {case.label}")
        for rule, variant in (("deterministic", case.context), ("empty groups", _without_empty_groups(case.context) if case.rule == "empty groups" else None)):
            if variant is None:
                continue
            try:
                again, _, _ = _as_terms(call(case.rewards.copy(), copy.deepcopy(variant)), case.rewards.size, case.label)
            except Exception as e:
                problems.setdefault(rule, f"the second call raised {type(e).__name__}: {e} ({case.label})")
                continue
            if again is None or sorted(again) != sorted(terms) or not all(np.array_equal(again[k], terms[k], equal_nan=True) for k in terms):
                what = "two calls on the same input differ" if rule == "deterministic" else "the terms differ without the empty group"
                problems.setdefault(rule, f"{what} ({case.label})")
    report = ShaperReport(spec.name)
    for rule in SHAPER_RULES:
        report.results.append((rule, rule not in problems, problems.get(rule, "")))
    return report
