"""The contract of an advantage transform, checked on synthetic advantages (``rllm-plugins check NAME`` for a transform name).

The inputs are those the paths hand a transform: at the sequence level, task groups of every size from 1 to 8, an empty
group first, in the middle and last (TRL's offsets ``[0, 2, 4, 4]``, verl's padding), and units without a model token
(``lengths`` 0) among the others; at the token level, batches of several shapes with rows without a model token (``mask``
all 0). Rules, one line each in the report:

- **group sizes 1-8**, **empty groups**, **units without model tokens** (token level: **batch shapes**, **rows without
  model tokens**): the transform runs on those inputs; an empty group changes no other unit's value (the same input without it gives the same);
- **shape**: the output has the input's shape; **finite**: every value is finite;
- **precision**: the output is float32 or wider (a float16 return would round grpo's 1.7320508 to 1.732421875 before any
  path converts it back);
- **no mutation**: the advantages and the context arrays are left unchanged (the check hands over writable copies);
- **deterministic**: the same input twice gives the identical output;
- **masked tokens** (token level): positions outside the mask are unchanged;
- **elementwise** (``elementwise=True``): each value's result is what it is on the whole array (so applying it per token to
  broadcast advantages equals broadcasting its per-sequence result, the path verl and TRL take for token-level advantages).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..transform_spec import transform_context
from .entries import narrow_dtype, narrow_dtype_message, resolve_transforms, trial_call, trial_context

__all__ = ["RULES", "TransformReport", "check_transform", "transform_rules"]

ELEMENTWISE = "elementwise (per token = per sequence)"
SEQUENCE_RULES = ("group sizes 1-8", "empty groups", "units without model tokens")
TOKEN_RULES = ("batch shapes", "rows without model tokens")
COMMON_RULES = ("shape", "finite", "precision", "no mutation", "deterministic")
RULES: Mapping[str, str] = {
    "group sizes 1-8": "runs on task groups of every size from 1 to 8",
    "empty groups": "runs with an empty group first, in the middle and last; an empty group changes no other unit's value",
    "units without model tokens": "runs with units of lengths 0 among the others",
    "batch shapes": "runs on (B, T) batches of several shapes, (1, 1) included",
    "rows without model tokens": "runs with rows whose mask is all 0",
    "shape": "the output has the input's shape",
    "finite": "every output value is finite",
    "precision": "the output is float32 or wider (float16, bfloat16, integers fail)",
    "no mutation": "the advantages and the context arrays are left unchanged",
    "deterministic": "the same input twice gives the identical output",
    "masked tokens": "positions outside the mask are unchanged (token level)",
    ELEMENTWISE: "each value's result is what it is on the whole array (elementwise=True)",
}
"""Every rule the check may report, with what it demands."""


@dataclass
class TransformReport:
    """Each rule's verdict: ``(rule, ok, detail)``."""

    name: str
    results: list[tuple[str, bool, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(ok for _, ok, _ in self.results)

    def as_dict(self) -> dict[str, Any]:
        return {"transform": self.name, "ok": self.ok, "rules": [{"rule": r, "ok": ok, "detail": d} for r, ok, d in self.results]}

    def __str__(self) -> str:
        lines = [f"advantage transform {self.name}: {'OK' if self.ok else 'FAILED'}"]
        lines += [f"  {'ok  ' if ok else 'FAIL'} {rule}{': ' + detail if detail else ''}" for rule, ok, detail in self.results]
        return "\n".join(lines)


@dataclass(frozen=True)
class _Case:
    """One input: its ``label`` in messages, the rule that fails if the call raises, the advantages and the context."""

    label: str
    rule: str
    advantages: np.ndarray
    context: dict[str, Any]


def _sequence_case(rng: np.random.Generator, label: str, rule: str, sizes: tuple[int, ...], tokenless: int = 0) -> _Case:
    n = sum(sizes)
    lengths = rng.integers(1, 9, n).astype(np.float64)
    lengths[rng.permutation(n)[:tokenless]] = 0.0
    scores = rng.integers(0, 2, n).astype(np.float64)
    context = {
        **trial_context("sequence"),
        "offsets": np.cumsum([0, *sizes]).astype(np.int64),
        "rewards": scores - rng.random(n) * 0.1,  # rewards shaped by a penalty, as verl's with use_kl_in_reward
        "scores": scores,
        "lengths": lengths,
        "mean_logprobs": np.where(lengths > 0, -rng.random(n) * 2, 0.0),
        "turn_index": np.zeros(n, dtype=np.int64),
        "traj_offsets": np.arange(n + 1, dtype=np.int64),
    }
    return _Case(label, rule, rng.normal(size=n) * 2, context)


def _sequence_cases(rng: np.random.Generator) -> list[_Case]:
    every = tuple(int(s) for s in rng.permutation(np.arange(1, 9)))
    return [
        _sequence_case(rng, f"groups of sizes {list(every)}", "group sizes 1-8", every),
        *(_sequence_case(rng, f"groups of size {s} only", "group sizes 1-8", (s,) * 3) for s in (1, 2)),
        _sequence_case(rng, "an empty group first (sizes [0, 3, 2])", "empty groups", (0, 3, 2)),
        _sequence_case(rng, "an empty group in the middle (sizes [2, 0, 4])", "empty groups", (2, 0, 4)),
        _sequence_case(rng, "an empty group last (sizes [2, 2, 0])", "empty groups", (2, 2, 0)),
        _sequence_case(rng, "units without model tokens (sizes [3, 4, 2], 3 of lengths 0)", "units without model tokens", (3, 4, 2), tokenless=3),
        _sequence_case(rng, "a group whose units all lack model tokens (sizes [2, 3])", "units without model tokens", (2, 3), tokenless=2),
    ]


def _token_cases(rng: np.random.Generator) -> list[_Case]:
    out = []
    for rows, cols, tokenless in ((1, 1, 0), (3, 5, 0), (4, 9, 0), (5, 6, 2)):
        mask = (rng.random((rows, cols)) < 0.7).astype(np.float64)
        mask[:, 0] = 1.0
        mask[rng.permutation(rows)[:tokenless]] = 0.0
        context = {"mask": mask, "logprobs": -rng.random((rows, cols)) * 3, "ref_logprobs": -rng.random((rows, cols)) * 3, "role": "all_groups"}
        label, rule = (
            (f"a ({rows}, {cols}) batch", TOKEN_RULES[0])
            if not tokenless
            else (f"a ({rows}, {cols}) batch, {tokenless} rows without model tokens", TOKEN_RULES[1])
        )
        out.append(_Case(label, rule, rng.normal(size=(rows, cols)) * mask, context))
    return out


def _without_empty_groups(case: _Case) -> dict[str, Any]:
    """``case``'s context with its empty groups left out of ``offsets`` (the same units)."""
    offsets = case.context["offsets"]
    return {**case.context, "offsets": np.concatenate([offsets[:1], offsets[1:][np.diff(offsets) > 0]])}


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
    return bool(a == b)


def transform_rules(spec: Any) -> list[str]:
    """The rules the check reports for a transform of this :class:`~rllm_plugins.transform_spec.TransformSpec`, in order."""
    rules = [*(TOKEN_RULES if spec.level == "token" else SEQUENCE_RULES), *COMMON_RULES]
    rules += ["masked tokens"] if spec.level == "token" else []
    rules += [ELEMENTWISE] if spec.elementwise else []
    return rules


def check_transform(name: str, options: Mapping[str, Any] | None = None, seed: int = 0) -> TransformReport:
    """Run the contract rules on transform ``name`` with ``options``; unknown names and options, and option values the
    transform refuses on a small input, raise ``ValueError``. Every other misbehaviour is a failing rule of the report."""
    (choice,) = resolve_transforms([{"name": name, **(options or {})}], "rllm-plugins check", trial=False)
    trial_call(choice, "rllm-plugins check", writable=True)  # option values it refuses: a ValueError, as at config time
    spec = choice.transform.spec
    named = transform_context(spec)
    who = f"advantage transform {spec.name!r} ({choice.transform.provider})"
    report = TransformReport(spec.name)
    rng = np.random.default_rng(seed)
    cases = _token_cases(rng) if spec.level == "token" else _sequence_cases(rng)
    problems: dict[str, str] = {}

    def call(advantages: np.ndarray, context: Mapping[str, Any]) -> Any:
        return spec.fn(advantages, **choice.options, **{k: v for k, v in context.items() if k in named})

    for case in cases:
        advantages, context = case.advantages.copy(), copy.deepcopy(case.context)
        try:
            result = call(advantages, context)
        except Exception as e:  # a transform that raises on an input the paths hand it: a finding, not an error of the check
            problems.setdefault(case.rule, f"raised {type(e).__name__}: {e} on {case.label}")
            continue
        narrow = narrow_dtype(result)
        if narrow is not None:
            problems.setdefault("precision", narrow_dtype_message(who, narrow) + f" (on {case.label})")
        try:
            out = np.asarray(result, dtype=np.float64)
        except (TypeError, ValueError) as e:
            problems.setdefault("shape", f"returned {type(result).__name__}, which is no array of numbers ({e}), on {case.label}")
            continue
        if out.shape != case.advantages.shape:
            problems.setdefault("shape", f"input {case.advantages.shape} gave {out.shape} on {case.label}")
            continue
        if not np.isfinite(out).all():
            problems.setdefault("finite", f"non-finite output on {case.label}")
        if not np.array_equal(case.advantages, advantages):
            problems.setdefault("no mutation", f"the transform changed its input advantages on {case.label}")
        changed = sorted(k for k in named if k in case.context and not _equal(context[k], case.context[k]))
        if changed:
            problems.setdefault("no mutation", f"the transform changed its context {changed} on {case.label}")
        try:
            again = np.asarray(call(case.advantages.copy(), copy.deepcopy(case.context)), dtype=np.float64)
        except Exception as e:
            problems.setdefault("deterministic", f"the second call on the same input raised {type(e).__name__}: {e} ({case.label})")
        else:
            if not np.array_equal(again, out, equal_nan=True):
                where = np.argwhere(~((again == out) | (np.isnan(again) & np.isnan(out))))[0].tolist()
                first, second = float(out[tuple(where)]), float(again[tuple(where)])
                problems.setdefault("deterministic", f"two calls on {case.label} differ at {where}: {first!r} then {second!r}")
        if case.rule == "empty groups" and "offsets" in named:
            try:
                base = np.asarray(call(case.advantages.copy(), _without_empty_groups(case)), dtype=np.float64)
            except Exception as e:
                problems.setdefault("empty groups", f"without the empty group it raised {type(e).__name__}: {e} ({case.label})")
            else:
                if not np.allclose(out, base, rtol=1e-12, atol=1e-12, equal_nan=True):
                    unit = int(np.flatnonzero(~np.isclose(out, base, rtol=1e-12, atol=1e-12, equal_nan=True))[0])
                    got, without = float(out[unit]), float(base[unit])
                    problems.setdefault("empty groups", f"{case.label}: unit {unit} got {got!r}, and {without!r} without the empty group")
        if spec.level == "token":
            outside = case.context["mask"] == 0
            if not np.array_equal(out[outside], case.advantages[outside]):
                problems.setdefault("masked tokens", f"positions outside the mask changed on {case.label}")
        if spec.elementwise:
            snapshot = case.advantages
            try:
                one_by_one = np.array(
                    [np.asarray(call(snapshot.reshape(-1)[i : i + 1].copy(), case.context), dtype=np.float64)[0] for i in range(snapshot.size)]
                )
            except Exception as e:
                problems.setdefault(ELEMENTWISE, f"on one value at a time it raised {type(e).__name__}: {e} ({case.label})")
            else:
                if not np.allclose(one_by_one, out.reshape(-1), rtol=1e-12, atol=1e-12, equal_nan=True):
                    problems.setdefault(ELEMENTWISE, f"a value's result depends on the other values ({case.label})")
    for rule in transform_rules(spec):
        report.results.append((rule, rule not in problems, problems.get(rule, "")))
    return report
