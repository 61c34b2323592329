"""The contract of an advantage transform, checked on synthetic advantages (``rllm-plugins check NAME`` for a transform name).

Rules: the output has the input's shape, is finite, and the input is left unchanged (the check hands over a
writable copy and compares); at the token level, positions outside the mask are unchanged; an ``elementwise``
transform gives, value by value, what it gives on the whole array (so applying it per token to broadcast
advantages equals broadcasting its per-sequence result, the path verl and TRL take for token-level advantages).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..transform_spec import transform_context
from .entries import resolve_transforms, trial_context

__all__ = ["TransformReport", "check_transform"]


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


def _inputs(level: str, rng: np.random.Generator) -> list[tuple[np.ndarray, dict[str, Any]]]:
    if level == "token":
        out = []
        for rows, cols in ((1, 1), (3, 5), (4, 9)):
            mask = (rng.random((rows, cols)) < 0.7).astype(np.float64)
            mask[:, 0] = 1.0
            context = {"mask": mask, "logprobs": -rng.random((rows, cols)) * 3, "ref_logprobs": -rng.random((rows, cols)) * 3, "role": "all_groups"}
            out.append((rng.normal(size=(rows, cols)) * mask, context))
        return out
    out = []
    for sizes in ((1,), (2, 3), (4, 1, 5)):
        n = sum(sizes)
        context = {**trial_context("sequence"), "offsets": np.cumsum([0, *sizes]), "rewards": rng.random(n)}
        context.update(lengths=rng.integers(1, 9, n).astype(np.float64), turn_index=np.zeros(n, dtype=np.int64), traj_offsets=np.arange(n + 1))
        context["mean_logprobs"] = -rng.random(n) * 2
        out.append((rng.normal(size=n) * 2, context))
    return out


def check_transform(name: str, options: Mapping[str, Any] | None = None, seed: int = 0) -> TransformReport:
    """Run the contract rules on transform ``name`` with ``options``; unknown names and options raise ``ValueError``."""
    (choice,) = resolve_transforms([{"name": name, **(options or {})}], "rllm-plugins check", trial=False)
    spec = choice.transform.spec
    named = transform_context(spec)
    report = TransformReport(spec.name)
    rng = np.random.default_rng(seed)
    problems: dict[str, str] = {}
    for advantages, context in _inputs(spec.level, rng):
        given = {k: v for k, v in context.items() if k in named}
        snapshot = advantages.copy()
        out = np.asarray(spec.fn(advantages, **choice.options, **given), dtype=np.float64)
        if out.shape != advantages.shape:
            problems.setdefault("shape", f"input {advantages.shape} gave {out.shape}")
            continue
        if not np.isfinite(out).all():
            problems.setdefault("finite", f"non-finite output on input of shape {advantages.shape}")
        if not np.array_equal(snapshot, advantages):
            problems.setdefault("no mutation", "the transform changed its input array")
        if spec.level == "token":
            outside = context["mask"] == 0
            if not np.array_equal(out[outside], snapshot[outside]):
                problems.setdefault("masked tokens", "positions outside the mask changed")
        if spec.elementwise:
            one_by_one = np.array([np.asarray(spec.fn(snapshot[i : i + 1].copy(), **choice.options, **given))[0] for i in range(snapshot.size)])
            if not np.allclose(one_by_one, out.reshape(-1), rtol=1e-12, atol=1e-12):
                problems.setdefault("elementwise (per token = per sequence)", "a value's result depends on the other values")
    rules = ["shape", "finite", "no mutation"] + (["masked tokens"] if spec.level == "token" else [])
    rules += ["elementwise (per token = per sequence)"] if spec.elementwise else []
    for rule in rules:
        report.results.append((rule, rule not in problems, problems.get(rule, "")))
    return report
