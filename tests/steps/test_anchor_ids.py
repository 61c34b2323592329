"""``anchor_ids`` numbers ``(task group, state)`` pairs alike whether it renumbers through a table or sorts."""

from __future__ import annotations

import numpy as np
import pytest

from rllm_plugins.steps.anchors import _TABLE_SPAN, anchor_ids


def plain_codes(states: list[str]) -> list[int]:
    code: dict[str, int] = {}
    return [code.setdefault(s, len(code)) for s in states]


def plain_ids(states: list[str], groups: list[int]) -> list[int]:
    """Each state coded by first appearance, the pairs (group, code) numbered in sorted order."""
    codes = plain_codes(states)
    pairs = sorted(set(zip(groups, codes, strict=True)))
    return [pairs.index(p) for p in zip(groups, codes, strict=True)]


@pytest.mark.parametrize("distinct", [3, 40, 400])  # key span / steps from below 1 to far above _TABLE_SPAN
@pytest.mark.parametrize("seed", range(3))
def test_anchor_ids_are_the_sorted_pairs_numbering(distinct: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    steps, task_groups = 300, 30
    groups = np.sort(rng.integers(0, task_groups, steps)).tolist()
    states = [f"s{int(v)}" for v in rng.integers(0, distinct, steps)]
    keys = np.array(groups) * len(set(states)) + np.array(plain_codes(states))  # anchor_ids' keys
    if distinct in (3, 400):  # the table, then the sort
        assert (int(keys.max()) + 1 <= _TABLE_SPAN * steps) == (distinct == 3)
    got = anchor_ids(states, groups, lambda s: f"step {s}")
    assert got.dtype == np.int64 and got.tolist() == plain_ids(states, groups)
    codes = np.unique(np.array(states), return_inverse=True)[1].reshape(-1) * 7  # codes given: any integers equal where states are
    assert anchor_ids(states, groups, lambda s: f"step {s}", codes).tolist() == got.tolist()
