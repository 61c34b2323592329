"""The turns of multi-turn rows (rllm_plugins.steps.turns) against a token-by-token reading of the rule."""

from __future__ import annotations

import numpy as np
import pytest

from rllm_plugins.steps.turns import PROMPT_ANCHOR, find_turns, spread_to_tokens, turn_anchor_states, turn_rewards


def plain_turns(mask_row):
    runs, j = [], 0
    while j < len(mask_row):
        if mask_row[j]:
            k = j
            while k < len(mask_row) and mask_row[k]:
                k += 1
            runs.append((j, k))
            j = k
        else:
            j += 1
    return runs


@pytest.mark.parametrize("seed", range(30))
def test_turns_rewards_anchors_and_spread_follow_the_rule(seed):
    rng = np.random.default_rng(seed)
    rows, length = int(rng.integers(1, 7)), int(rng.integers(1, 12))
    mask = rng.integers(0, 2, (rows, length)).astype(rng.choice([np.int64, np.float32, bool]))
    rewards = rng.normal(size=(rows, length))
    tokens = rng.integers(0, 50, (rows, length))
    turns = find_turns(mask)
    got_rewards, got_states = turn_rewards(rewards, turns).tolist(), turn_anchor_states(tokens, turns)
    values = rng.normal(size=turns.num_turns)
    spread = spread_to_tokens(values, turns, dtype=np.float64)
    j = 0
    for b in range(rows):
        runs = plain_turns(mask[b].tolist())
        assert turns.per_row[b] == len(runs)
        for k, (start, end) in enumerate(runs):
            assert (turns.row[j], turns.start[j], turns.end[j]) == (b, start, end)
            segment_end = runs[k + 1][0] if k + 1 < len(runs) else length
            assert got_rewards[j] == pytest.approx(rewards[b, 0 if k == 0 else start : segment_end].sum())
            assert got_states[j] == (PROMPT_ANCHOR if k == 0 else tokens[b, runs[k - 1][1] : start].tobytes())
            assert (spread[b, start:end] == values[j]).all()
            j += 1
        model = np.zeros(length, dtype=bool)
        for start, end in runs:
            model[start:end] = True
        assert (spread[b, ~model] == 0).all()
    assert j == turns.num_turns


def test_the_turn_rewards_of_a_row_add_up_to_its_total():
    mask = np.array([[0, 1, 1, 0, 1, 0], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1]])
    rewards = np.arange(24, dtype=np.float32).reshape(4, 6)
    turns = find_turns(mask)
    sums = np.add.reduceat(turn_rewards(rewards, turns), turns.row_offsets[:-1][turns.per_row > 0])
    assert sums.tolist() == [rewards[0].sum(), rewards[1].sum(), rewards[3].sum()]  # row 2 has no turn


def test_a_mask_that_is_not_two_dimensional_is_refused():
    with pytest.raises(ValueError, match=r"must be 2-D \(batch, response_length\), got shape \(3,\)"):
        find_turns(np.ones(3))
