"""The turns of multi-turn rows (rllm_plugins.steps.turns) against a token-by-token reading of the rule."""

from __future__ import annotations

import numpy as np
import pytest

from rllm_plugins.steps import turns as turns_module
from rllm_plugins.steps.anchors import anchor_ids
from rllm_plugins.steps.turns import PROMPT_ANCHOR, find_turns, spread_to_tokens, turn_anchor_codes, turn_anchor_states, turn_rewards


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


@pytest.mark.parametrize("seed", range(20))
def test_turns_found_in_blocks_of_rows_are_the_runs_of_non_zero_entries(monkeypatch, seed):
    """Blocks of one row or a few (the block size made small); entries other than 0 and 1 (2, NaN, -0.0) count by ``!= 0``."""
    monkeypatch.setattr(turns_module, "_BLOCK_ENTRIES", int(np.random.default_rng(seed).integers(1, 40)))
    rng = np.random.default_rng(seed)
    rows, length = int(rng.integers(1, 12)), int(rng.integers(1, 15))
    mask = rng.choice(np.array([0.0, -0.0, 1.0, 2.0, np.nan]), size=(rows, length)).astype(rng.choice([np.float64, np.float32]))
    turns = find_turns(mask)
    want = [(b, start, end) for b in range(rows) for start, end in plain_turns((mask[b] != 0).tolist())]
    assert list(zip(turns.row.tolist(), turns.start.tolist(), turns.end.tolist(), strict=True)) == want
    assert turns.per_row.tolist() == [sum(1 for w in want if w[0] == b) for b in range(rows)]


MASK_VALUES = {
    np.int64: [0, 1, 2, -1, np.iinfo(np.int64).min, np.iinfo(np.int64).max],
    np.int32: [0, 1, 7, -1],
    np.uint8: [0, 1, 255],
    np.float32: [0.0, -0.0, 1.0, 0.5, np.nan, -np.inf],
    bool: [False, True],
}


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("dtype", list(MASK_VALUES))
def test_turns_of_masks_of_any_values_dtype_and_memory_layout(monkeypatch, seed, dtype):
    """The mask's entries are compared as they are, not as bools: a change between two non-zero values (1 to 2, -1 to
    INT64_MIN, NaN to NaN) is no boundary, and zero counts as zero however written (-0.0). Rows that end non-zero next to
    rows that start non-zero, equal or not; blocks of a few entries; C order, Fortran order and reversed columns."""
    monkeypatch.setattr(turns_module, "_BLOCK_ENTRIES", int(np.random.default_rng(seed).integers(1, 64)))
    rng = np.random.default_rng(seed)
    rows, length = int(rng.integers(1, 10)), int(rng.integers(1, 12))
    values = np.array(MASK_VALUES[dtype], dtype=dtype)
    mask = rng.choice(values, size=(rows, length), p=np.r_[0.4, np.full(values.size - 1, 0.6 / (values.size - 1))])
    for layout in (mask, np.asfortranarray(mask), np.ascontiguousarray(mask[:, ::-1])[:, ::-1]):
        turns = find_turns(layout)
        want = [(b, start, end) for b in range(rows) for start, end in plain_turns((mask[b] != 0).tolist())]
        assert list(zip(turns.row.tolist(), turns.start.tolist(), turns.end.tolist(), strict=True)) == want
        assert turns.per_row.tolist() == [sum(1 for w in want if w[0] == b) for b in range(rows)]
        assert turns.row.dtype == turns.start.dtype == turns.end.dtype == np.int64


@pytest.mark.parametrize(
    ("mask", "want"),
    [
        ([[1, 1], [1, 1]], [(0, 0, 2), (1, 0, 2)]),  # a row ends and the next starts with the same value: no change between them
        ([[1, 2], [2, 1]], [(0, 0, 2), (1, 0, 2)]),  # 1 to 2 to 2 to 1: changes, no boundaries
        ([[0, 2], [0, 0], [-1, 0]], [(0, 1, 2), (2, 0, 1)]),
        ([[3], [3], [0], [3]], [(0, 0, 1), (1, 0, 1), (3, 0, 1)]),
    ],
)
def test_turns_at_the_edges_of_rows(mask, want):
    for dtype in (np.int64, np.float64, bool):
        turns = find_turns(np.array(mask).astype(dtype))
        assert list(zip(turns.row.tolist(), turns.start.tolist(), turns.end.tolist(), strict=True)) == want


def plain_states(tokens, mask):
    """Each turn's state as the rule says: PROMPT_ANCHOR, else the int64 bytes of the tokens between it and the turn before."""
    states = []
    for b in range(mask.shape[0]):
        runs = plain_turns(mask[b].tolist())
        states += [PROMPT_ANCHOR] + [np.asarray(tokens[b, runs[k - 1][1] : start]).astype(np.int64).tobytes() for k, (start, _) in enumerate(runs) if k]
    return states


def repeating_case(seed, dtype=np.int64):
    """Rows of turns between environment segments drawn from a few (so states repeat), of 1-6 tokens."""
    rng = np.random.default_rng(seed)
    segments = [rng.integers(0, 5, int(k)).astype(dtype) for k in rng.integers(1, 7, 5)]
    rows, length = int(rng.integers(1, 9)), int(rng.integers(10, 40))
    mask, tokens = np.zeros((rows, length), dtype=np.int64), rng.integers(0, 5, (rows, length)).astype(dtype)
    for b in range(rows):
        pos = int(rng.integers(0, 3))
        while pos < length:
            k = int(rng.integers(1, 5))
            mask[b, pos : pos + k] = 1
            pos += k
            segment = segments[int(rng.integers(0, len(segments)))]
            tokens[b, pos : pos + segment.size] = segment[: max(0, length - pos)]
            pos += segment.size
    return tokens, mask


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float64])
def test_anchor_codes_are_dense_in_order_of_first_appearance_and_equal_exactly_for_equal_states(seed, dtype):
    tokens, mask = repeating_case(seed, dtype)
    turns = find_turns(mask)
    want = plain_states(tokens, mask)
    codes, distinct = turn_anchor_codes(tokens, turns)
    first_seen = list(dict.fromkeys(want))
    assert distinct == first_seen
    assert codes.tolist() == [first_seen.index(state) for state in want]
    states = turn_anchor_states(tokens, turns)
    assert states == want
    assert len({id(state) for state in states}) == len(set(states))  # equal states, one object


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("layout", ["fortran", "strided", "rows_apart", "uint8", "bool"])
def test_anchor_codes_of_tokens_in_any_layout(seed, layout):
    """Tokens not contiguous along a row (read by copy), rows contiguous but apart (the columns of a wider array), or of
    narrow integer dtypes (read as their own bytes): the same states."""
    tokens, mask = repeating_case(seed)
    if layout == "rows_apart":
        tokens = np.concatenate([tokens, np.full_like(tokens, 7)], axis=1)[:, : tokens.shape[1]]
    elif layout == "fortran":
        tokens = np.asfortranarray(tokens)
    elif layout == "strided":
        tokens = np.repeat(tokens, 2, axis=1)[:, ::2]
    else:
        tokens = (tokens % 2).astype(layout)
    want = plain_states(tokens, mask)
    codes, distinct = turn_anchor_codes(tokens, find_turns(mask))
    assert [distinct[c] for c in codes.tolist()] == want
    assert distinct == list(dict.fromkeys(want))


@pytest.mark.parametrize(
    "attribute, value",
    [
        ("_SALTS", (0,)),  # every key in one slot each round: the rounds find one group each, the rest are grouped by a sort
        ("_multipliers", lambda length: np.zeros(length, dtype=np.uint64)),  # every hash equal: codes fall back to the segments' bytes
    ],
    ids=["hash table keeps colliding", "hashes collide"],
)
def test_anchor_codes_stay_exact_when_hashing_fails(monkeypatch, attribute, value):
    """Segments a broken hash cannot tell apart are still coded exactly."""
    monkeypatch.setattr(turns_module, attribute, value)
    for seed in range(10):
        tokens, mask = repeating_case(seed)
        want = plain_states(tokens, mask)
        codes, distinct = turn_anchor_codes(tokens, find_turns(mask))
        assert [distinct[c] for c in codes.tolist()] == want
        assert distinct == list(dict.fromkeys(want))


@pytest.mark.parametrize("seed", range(10))
def test_anchor_ids_from_codes_are_those_of_the_states(seed):
    """Codes in any numbering (here permuted) give the ids the states give, and refuse what is no code."""
    tokens, mask = repeating_case(seed)
    turns = find_turns(mask)
    codes, _ = turn_anchor_codes(tokens, turns)
    states = turn_anchor_states(tokens, turns)
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, 3, turns.num_turns)
    order = rng.permutation(turns.num_turns)
    want = anchor_ids([states[j] for j in order.tolist()], groups, str)
    assert anchor_ids(states, groups[np.argsort(order)], str, codes).tolist() == anchor_ids(states, groups[np.argsort(order)], str).tolist()
    renamed = rng.permutation(int(codes.max()) + 1)[codes] * 7 + 3  # other code values, same equalities
    assert anchor_ids([], groups, str, renamed[order]).tolist() == want.tolist()
    with pytest.raises(ValueError, match=r"codes must be a 1-D array of integers >= 0"):
        anchor_ids([], groups, str, -renamed[order])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_spread_writes_each_turn_value_bit_for_bit_and_zero_elsewhere(dtype):
    """Values cast to the output dtype as an assignment casts them: float32 rounding, -0.0 kept, huge and tiny values."""
    rng = np.random.default_rng(0)
    mask = rng.integers(0, 2, (50, 37))
    mask[3] = 0
    turns = find_turns(mask)
    values = rng.normal(size=turns.num_turns) * 10.0 ** rng.integers(-40, 39, turns.num_turns)
    values[::7] = -0.0
    want = np.zeros(mask.shape, dtype=dtype)
    for j in range(turns.num_turns):
        want[turns.row[j], turns.start[j] : turns.end[j]] = values[j]
    got = spread_to_tokens(values, turns, dtype=dtype)
    assert got.dtype == dtype and got.shape == mask.shape
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("shape", [(0, 5), (3, 0), (0, 0), (4, 6)])
def test_batches_without_turns_have_none_and_spread_to_zeros(shape):
    turns = find_turns(np.zeros(shape))
    assert turns.num_turns == 0 and turns.per_row.tolist() == [0] * shape[0]
    assert turn_anchor_states(np.zeros(shape, dtype=np.int64), turns) == []
    assert spread_to_tokens(np.zeros(0), turns).tolist() == np.zeros(shape).tolist()


def test_values_or_tokens_that_do_not_fit_the_turns_are_refused():
    turns = find_turns(np.array([[1, 0, 1], [1, 1, 0]]))
    with pytest.raises(ValueError, match=r"spread_to_tokens: one value per turn is needed, got shape \(1,\) for 3 turns"):
        spread_to_tokens(np.ones(1), turns)
    with pytest.raises(ValueError, match=r"the token ids have shape \(2, 2\), the mask the turns were found in \(2, 3\)"):
        turn_anchor_states(np.zeros((2, 2), dtype=np.int64), turns)
