"""The contract of a step-level estimator (``AdvEstimatorSpec(level="step")``), checked on synthetic task groups.

Cases mix groups of one, trajectories of one step, all-equal returns, extreme magnitudes and
anchor states that repeat across trajectories and across groups; an estimator gets anchor states only
when its spec says ``needs_anchors=True`` (as from the collector and the adapters). Each rule returns ``None``
(it holds) or a message; :func:`check_step_rules` runs them all.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..calling import call_with_accepted_kwargs
from ..outputs import as_advantages
from ..step_forms import batch_from_lists

__all__ = ["STEP_RULES", "StepCase", "check_step_rules", "step_cases"]

TOL = 1e-6


@dataclass(frozen=True)
class StepCase:
    """Per group, per trajectory: outcome, step rewards and anchor states (tuples, so a case is immutable)."""

    outcomes: tuple[tuple[float, ...], ...]
    step_rewards: tuple[tuple[tuple[float, ...], ...], ...]
    anchors: tuple[tuple[tuple[str, ...], ...], ...]

    def inputs(self, anchors: Any = None, *, with_anchors: bool = True) -> dict[str, Any]:
        """The list form's keyword arguments; ``with_anchors=False``: ``anchor_states=None``, as callers give an estimator that needs none."""
        return {
            "rewards": [np.array(g, dtype=np.float64) for g in self.outcomes],
            "step_rewards": [[np.array(t, dtype=np.float64) for t in g] for g in self.step_rewards],
            "anchor_states": [[list(t) for t in g] for g in (self.anchors if anchors is None else anchors)] if with_anchors else None,
        }

    def __str__(self) -> str:
        rewards = [[list(t) for t in g] for g in self.step_rewards]
        return f"outcomes={[list(g) for g in self.outcomes]}, step_rewards={rewards}, anchors={[[list(t) for t in g] for g in self.anchors]}"


def step_cases(seed: int) -> list[StepCase]:
    """Synthetic task groups: varied, groups of one, one-step trajectories, all-equal returns, extreme magnitudes, none."""
    rng = np.random.default_rng(seed)

    def case(sizes: list[int], max_steps: int, draw: Callable[[int], np.ndarray]) -> StepCase:
        outcomes, rewards, anchors = [], [], []
        for g, n in enumerate(sizes):
            lengths = rng.integers(1, max_steps + 1, n)
            outcomes.append(tuple(float(x) for x in draw(n)))
            rewards.append(tuple(tuple(float(x) for x in draw(int(t))) for t in lengths))
            anchors.append(tuple(tuple(f"s{int(rng.integers(0, 3))}" if t else f"task{g}" for t in range(int(k))) for k in lengths))
        return StepCase(tuple(outcomes), tuple(rewards), tuple(anchors))

    def extreme(n: int) -> np.ndarray:
        return rng.choice([-1.0, 1.0], n) * rng.choice([1e30, 1e-30, 1.0], n)

    def constant(n: int) -> np.ndarray:
        return np.full(n, 2.0)

    return [
        case([3, 4], 4, lambda n: rng.normal(size=n)),
        case([4, 4, 2], 5, lambda n: rng.integers(0, 2, n).astype(float)),
        case([1, 3, 1], 3, lambda n: rng.normal(size=n)),
        case([4, 2], 1, lambda n: rng.normal(size=n)),
        case([3, 3], 4, constant),
        case([3, 4], 3, extreme),
        case([5], 6, lambda n: rng.normal(0.0, 10.0, n)),
        StepCase((), (), ()),
    ]


def _flat(nested: Any) -> np.ndarray:
    return np.concatenate([as_advantages(t, "estimator") for g in nested for t in g]) if len(nested) else np.zeros(0)


def _batched(spec: Any, case: StepCase) -> np.ndarray:
    inputs = case.inputs(with_anchors=spec.needs_anchors)
    batch = batch_from_lists(inputs["rewards"], inputs["step_rewards"], inputs["anchor_states"])
    out = as_advantages(call_with_accepted_kwargs(spec.batched_form, batch, norm_adv_by_std_in_grpo=True), "the batched form")
    if out.size != batch.num_steps:
        raise ValueError(f"the batched form returned {out.size} advantages for {batch.num_steps} steps")
    return out


def _listed(spec: Any, case: StepCase, anchors: Any = None) -> np.ndarray:
    result = call_with_accepted_kwargs(spec.list_form, **case.inputs(anchors, with_anchors=spec.needs_anchors), norm_adv_by_std_in_grpo=True)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ValueError(f"the list form returned {type(result).__name__}, not (advantages_by_group, returns_by_group)")
    advantages = result[0]
    if len(advantages) != len(case.outcomes) or any(len(a) != len(g) for a, g in zip(advantages, case.outcomes, strict=True)):
        raise ValueError("the list form's advantages are not [group][trajectory] like its input")
    for a_g, r_g in zip(advantages, case.step_rewards, strict=True):
        for a, r in zip(a_g, r_g, strict=True):
            if as_advantages(a, "the list form").size != len(r):
                raise ValueError("the list form's advantages do not have one value per step")
    return _flat(advantages)


def valid_output(spec: Any, case: StepCase) -> str | None:
    out = _batched(spec, case)
    return None if np.isfinite(out).all() else f"non-finite advantage {out[~np.isfinite(out)][0]}"


def list_output(spec: Any, case: StepCase) -> str | None:
    _listed(spec, case)
    return None


def forms_agree(spec: Any, case: StepCase) -> str | None:
    a, b = _listed(spec, case), _batched(spec, case)
    scale = max(1.0, float(np.abs(b).max(initial=0.0)))
    return None if np.allclose(a, b, rtol=TOL, atol=TOL * scale) else f"list form {a.tolist()} != batched form {b.tolist()}"


def deterministic(spec: Any, case: StepCase) -> str | None:
    return None if np.array_equal(_batched(spec, case), _batched(spec, case)) else "two calls on the same input differ"


def trajectory_order(spec: Any, case: StepCase) -> str | None:
    """Reversing the trajectories of every group reverses their advantages."""
    reversed_case = StepCase(*(tuple(tuple(reversed(g)) for g in part) for part in (case.outcomes, case.step_rewards, case.anchors)))
    got = _listed(spec, reversed_case)
    want_nested = []
    bounds = np.cumsum([0] + [len(t) for g in case.step_rewards for t in g])
    flat = _listed(spec, case)
    k = 0
    for g in case.step_rewards:
        trajs = [flat[bounds[k + i] : bounds[k + i + 1]] for i in range(len(g))]
        want_nested.extend(reversed(trajs))
        k += len(g)
    want = np.concatenate(want_nested) if want_nested else np.zeros(0)
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    return None if np.allclose(got, want, rtol=TOL, atol=TOL * scale) else "reordering a group's trajectories changed their advantages"


def anchors_stay_in_their_group(spec: Any, case: StepCase) -> str | None:
    """Equal anchor states in different task groups never form one anchor group: renaming them apart changes nothing."""
    apart = tuple(tuple(tuple(f"g{g}:{a}" for a in t) for t in group) for g, group in enumerate(case.anchors))
    same, renamed = _listed(spec, case), _listed(spec, case, apart)
    scale = max(1.0, float(np.abs(same).max(initial=0.0)))
    return None if np.allclose(same, renamed, rtol=TOL, atol=TOL * scale) else "equal anchor states in different task groups were compared"


def no_mutation(spec: Any, case: StepCase) -> str | None:
    inputs = case.inputs(with_anchors=spec.needs_anchors)
    before = copy.deepcopy(inputs)
    call_with_accepted_kwargs(spec.list_form, **inputs, norm_adv_by_std_in_grpo=True)
    same = all(np.array_equal(a, b) for a, b in zip(inputs["rewards"], before["rewards"], strict=True)) and all(
        np.array_equal(a, b) for g, h in zip(inputs["step_rewards"], before["step_rewards"], strict=True) for a, b in zip(g, h, strict=True)
    )
    return None if same and inputs["anchor_states"] == before["anchor_states"] else "the estimator changed its inputs"


def empty_input(spec: Any, case: StepCase) -> str | None:
    anchors = [] if spec.needs_anchors else None
    result = call_with_accepted_kwargs(spec.list_form, rewards=[], step_rewards=[], anchor_states=anchors, norm_adv_by_std_in_grpo=True)
    return None if [list(r) for r in result] == [[], []] else f"empty input gave {result!r}, not ([], [])"


STEP_RULES: dict[str, tuple[str, Callable[[Any, StepCase], str | None]]] = {
    "valid_output": ("the batched form returns one finite real advantage per step", valid_output),
    "list_output": ("the list form returns (advantages, returns), [group][trajectory], one value per step", list_output),
    "forms_agree": ("list and batched forms agree to 1e-6", forms_agree),
    "deterministic": ("the same input gives the same advantages", deterministic),
    "trajectory_order": ("reordering a group's trajectories reorders their advantages", trajectory_order),
    "anchors_stay_in_their_group": ("equal anchor states of different task groups never meet", anchors_stay_in_their_group),
    "no_mutation": ("the inputs are left unchanged", no_mutation),
    "empty_input": ("no groups gives ([], [])", empty_input),
}


def check_step_rules(spec: Any, seed: int) -> tuple[dict[str, str], list[tuple[str, str, StepCase]]]:
    """Verdict per rule (``pass`` / ``FAIL``) and the violations ``(rule, message, case)``; never raises for a misbehaving estimator."""
    verdicts: dict[str, str] = {}
    violations: list[tuple[str, str, StepCase]] = []
    cases = step_cases(seed)
    for name, (_, check) in STEP_RULES.items():
        if name == "anchors_stay_in_their_group" and not spec.needs_anchors:
            verdicts[name] = "skipped: the estimator reads no anchor states (needs_anchors=False)"
            continue
        verdicts[name] = "pass"
        for case in cases if name != "empty_input" else cases[-1:]:
            if not case.outcomes and name not in ("empty_input", "list_output", "no_mutation"):
                continue
            try:
                message = check(spec, case)
            except Exception as e:
                message = f"raised {type(e).__name__}: {e}"
            if message:
                violations.append((name, message, case))
                verdicts[name] = "FAIL"
                break
    return verdicts, violations
