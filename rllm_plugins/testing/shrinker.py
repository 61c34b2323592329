"""Shrinking a failing case: simplify it greedily while it still breaks the same rule.

Simpler means fewer groups, then fewer trajectories, then simpler rewards (0, 1, -1, small
integers), then response lengths of 1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from .calls import Case, Subject
from .rules import Rule

__all__ = ["MAX_SHRINK_CALLS", "greedy_shrink", "shrink", "smaller"]

MAX_SHRINK_CALLS = 300

C = TypeVar("C")


def _replaced(items: tuple[Any, ...], i: int, item: Any) -> tuple[Any, ...]:
    return (*items[:i], item, *items[i + 1 :])


def _dropped(items: tuple[Any, ...], i: int) -> tuple[Any, ...]:
    return (*items[:i], *items[i + 1 :])


def _complexity(value: float) -> tuple[int, float]:
    """Order of simplicity for rewards: 0, 1, -1, other integers (smaller first), anything else."""
    for rank, simple in enumerate((0.0, 1.0, -1.0)):
        if value == simple:
            return rank, 0.0
    return (3, abs(value)) if float(value).is_integer() else (4, 0.0)


def smaller(case: Case) -> Iterator[Case]:
    """Candidate simplifications of ``case``, most aggressive first."""
    rewards, lengths = case.rewards, case.lengths
    for g in range(len(rewards)):
        yield Case(_dropped(rewards, g), _dropped(lengths, g))
    for g, group in enumerate(rewards):
        for t in range(len(group)):
            yield Case(_replaced(rewards, g, _dropped(group, t)), _replaced(lengths, g, _dropped(lengths[g], t)))
    for g, group in enumerate(rewards):
        for t, value in enumerate(group):
            for simpler in (0.0, 1.0, -1.0, float(round(value))):
                if _complexity(simpler) < _complexity(value):
                    yield Case(_replaced(rewards, g, _replaced(group, t, simpler)), lengths)
    for g, group in enumerate(lengths):
        for t, n in enumerate(group):
            if n != 1:
                yield Case(rewards, _replaced(lengths, g, _replaced(group, t, 1)))


def greedy_shrink(candidates: Callable[[C], Iterable[C]], judge: Callable[[C], str | None], case: C, message: str) -> tuple[C, str]:
    """Take the first of ``candidates(case)`` that ``judge`` still faults, and repeat (at most :data:`MAX_SHRINK_CALLS` judgements).

    Returns the simplest case reached and ``judge``'s message for it (``case``, ``message`` when none was simpler).
    """
    calls = 0
    progress = True
    while progress and calls < MAX_SHRINK_CALLS:
        progress = False
        for candidate in candidates(case):
            calls += 1
            found = judge(candidate)
            if found:
                case, message, progress = candidate, found, True
                break
            if calls >= MAX_SHRINK_CALLS:
                break
    return case, message


def shrink(rule: Rule, subject: Subject, case: Case, message: str, seed: int) -> tuple[Case, str]:
    """The simplest case found that still breaks ``rule`` (at most :data:`MAX_SHRINK_CALLS` tries), and its message."""

    def applicable(current: Case) -> Iterator[Case]:
        return (candidate for candidate in smaller(current) if rule.applies(candidate))

    return greedy_shrink(applicable, lambda candidate: rule.judge(subject, candidate, seed), case, message)
