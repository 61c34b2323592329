"""Shrinking a failing step-level case: simplify it greedily while it still breaks the same rule.

Simpler means fewer task groups, then fewer trajectories, then fewer steps, then simpler outcomes and
step rewards (0, 1, -1, small integers), then one anchor state where there were several; as
:mod:`.shrinker` does for outcome-level cases.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .shrinker import MAX_SHRINK_CALLS, _complexity

StepCase = Any  # a step_contract.StepCase (which imports this module): outcomes, step_rewards, anchors, as nested tuples

__all__ = ["shrink_step_case", "smaller_step_cases"]


def _without(items: tuple[Any, ...], i: int) -> tuple[Any, ...]:
    return (*items[:i], *items[i + 1 :])


def _with(items: tuple[Any, ...], i: int, item: Any) -> tuple[Any, ...]:
    return (*items[:i], item, *items[i + 1 :])


def _simpler_values(value: float) -> Iterator[float]:
    for simpler in (0.0, 1.0, -1.0, float(round(value))):
        if _complexity(simpler) < _complexity(value):
            yield simpler


def smaller_step_cases(case: StepCase) -> Iterator[StepCase]:
    """Candidate simplifications of ``case``, most aggressive first."""
    kind = type(case)
    outcomes, rewards, anchors = case.outcomes, case.step_rewards, case.anchors
    for g in range(len(outcomes)):
        yield kind(_without(outcomes, g), _without(rewards, g), _without(anchors, g))
    for g, group in enumerate(outcomes):
        if len(group) > 1:
            for i in range(len(group)):
                yield kind(_with(outcomes, g, _without(group, i)), _with(rewards, g, _without(rewards[g], i)), _with(anchors, g, _without(anchors[g], i)))
    for g, group in enumerate(rewards):
        for i, steps in enumerate(group):
            for t in range(len(steps)) if len(steps) > 1 else ():
                yield kind(
                    outcomes, _with(rewards, g, _with(group, i, _without(steps, t))), _with(anchors, g, _with(anchors[g], i, _without(anchors[g][i], t)))
                )
    for g, group in enumerate(outcomes):
        for i, value in enumerate(group):
            for simpler in _simpler_values(value):
                yield kind(_with(outcomes, g, _with(group, i, simpler)), rewards, anchors)
    for g, group in enumerate(rewards):
        for i, steps in enumerate(group):
            for t, value in enumerate(steps):
                for simpler in _simpler_values(value):
                    yield kind(outcomes, _with(rewards, g, _with(group, i, _with(steps, t, simpler))), anchors)
    for g, group in enumerate(anchors):
        for i, states in enumerate(group):
            for t, state in enumerate(states):
                if state != "s0":
                    yield kind(outcomes, rewards, _with(anchors, g, _with(group, i, _with(states, t, "s0"))))


def shrink_step_case(judge: Callable[[StepCase], str | None], case: StepCase, message: str) -> tuple[StepCase, str]:
    """The simplest case found on which ``judge`` still reports a violation (at most :data:`MAX_SHRINK_CALLS` tries), and its message."""
    calls = 0
    progress = True
    while progress and calls < MAX_SHRINK_CALLS:
        progress = False
        for candidate in smaller_step_cases(case):
            calls += 1
            found = judge(candidate)
            if found:
                case, message, progress = candidate, found, True
                break
            if calls >= MAX_SHRINK_CALLS:
                break
    return case, message
