"""Shrinking a failing step-level case: simplify it greedily while it still breaks the same rule.

Simpler means fewer task groups, then fewer trajectories, then fewer steps, then simpler outcomes and
step rewards (0, 1, -1, small integers), then one anchor state where there were several; as
:mod:`.shrinker` does for outcome-level cases.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .shrinker import _complexity, _dropped, _replaced, greedy_shrink

StepCase = Any  # a step_contract.StepCase (which imports this module): outcomes, step_rewards, anchors, as nested tuples

__all__ = ["shrink_step_case", "smaller_step_cases"]


def _simpler_values(value: float) -> Iterator[float]:
    for simpler in (0.0, 1.0, -1.0, float(round(value))):
        if _complexity(simpler) < _complexity(value):
            yield simpler


def smaller_step_cases(case: StepCase) -> Iterator[StepCase]:
    """Candidate simplifications of ``case``, most aggressive first."""
    kind = type(case)
    outcomes, rewards, anchors = case.outcomes, case.step_rewards, case.anchors
    for g in range(len(outcomes)):
        yield kind(_dropped(outcomes, g), _dropped(rewards, g), _dropped(anchors, g))
    for g, group in enumerate(outcomes):
        if len(group) > 1:
            for i in range(len(group)):
                yield kind(
                    _replaced(outcomes, g, _dropped(group, i)), _replaced(rewards, g, _dropped(rewards[g], i)), _replaced(anchors, g, _dropped(anchors[g], i))
                )
    for g, group in enumerate(rewards):
        for i, steps in enumerate(group):
            for t in range(len(steps)) if len(steps) > 1 else ():
                yield kind(
                    outcomes,
                    _replaced(rewards, g, _replaced(group, i, _dropped(steps, t))),
                    _replaced(anchors, g, _replaced(anchors[g], i, _dropped(anchors[g][i], t))),
                )
    for g, group in enumerate(outcomes):
        for i, value in enumerate(group):
            for simpler in _simpler_values(value):
                yield kind(_replaced(outcomes, g, _replaced(group, i, simpler)), rewards, anchors)
    for g, group in enumerate(rewards):
        for i, steps in enumerate(group):
            for t, value in enumerate(steps):
                for simpler in _simpler_values(value):
                    yield kind(outcomes, _replaced(rewards, g, _replaced(group, i, _replaced(steps, t, simpler))), anchors)
    for g, group in enumerate(anchors):
        for i, states in enumerate(group):
            for t, state in enumerate(states):
                if state != "s0":
                    yield kind(outcomes, rewards, _replaced(anchors, g, _replaced(group, i, _replaced(states, t, "s0"))))


def shrink_step_case(judge: Callable[[StepCase], str | None], case: StepCase, message: str) -> tuple[StepCase, str]:
    """The simplest case found on which ``judge`` still reports a violation (at most :data:`.shrinker.MAX_SHRINK_CALLS` tries), and its message."""
    return greedy_shrink(smaller_step_cases, judge, case, message)
