"""The rows' description of the step-level path (:class:`rllm_trl.turns.RowTurns`), against a plain walk of each row.

Hostile rows: no token (TRL masked the completion), tokens but no model token, one turn, a completion that runs to
the last position (truncated), mask values other than 0/1, masks of every dtype; prompts left- and right-padded, with
holes, equal but for their padding, of width 0. The masks' blocks (``local_turns``) are forced small, and the rows
are split over several processes and joined (``RowTurns.concat``): the same turns, states, anchor groups and values.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable

import numpy as np
import pytest
from rllm_trl import turns as turns_module
from rllm_trl.turns import ANCHOR_STATES_KEY, RowTurns, local_turns, row_turns, spread_local, step_advantages

from rllm_plugins.estimators import gigpo
from rllm_plugins.steps import StepBatch
from rllm_plugins.steps.turns import PROMPT_ANCHOR

PROMPT = "<prompt>"  # the tag of a turn-0 state, as the module docstring gives it
DTYPES = [bool, np.int8, np.int32, np.int64, np.float32]


def hostile_batch(rng: np.random.Generator, rows: int, length: int, width: int) -> dict[str, np.ndarray]:
    """Completion ids and masks with every kind of row; prompts of ``width`` ids, one per group of 2 rows, padded at random."""
    ids = rng.integers(0, 4, (rows, length))
    completion = np.zeros((rows, length), dtype=np.int64)
    tool = np.zeros((rows, length), dtype=np.int64)
    for b in range(rows):
        kind = b % 6
        end = length if kind in (0, 3) else int(rng.integers(0, length + 1))  # 0, 3: truncated (to the last position)
        completion[b, :end] = rng.integers(1, 3, end) if kind == 4 else 1  # 4: values 1 and 2
        tool[b, :end] = rng.integers(0, 2, end)
        if kind == 1:  # no token at all
            completion[b] = 0
        elif kind == 2:  # tokens, no model token
            tool[b] = 0
        elif kind == 3:  # one turn over the whole row
            tool[b] = 1
        elif kind == 5:  # holes in the completion mask
            completion[b, rng.random(length) < 0.3] = 0
    prompt_ids = np.repeat(rng.integers(1, 4, (rows // 2, width)), 2, axis=0)
    prompt_mask = np.ones_like(prompt_ids)
    for b in range(rows):
        pad = int(rng.integers(0, width + 1))
        if b % 3 == 0:
            prompt_mask[b, :pad] = 0  # left padding
        elif b % 3 == 1:
            prompt_mask[b, width - pad :] = 0  # right padding
        else:
            prompt_mask[b, rng.random(width) < 0.4] = 0  # holes
    prompt_ids[prompt_mask == 0] = rng.integers(0, 9, int((prompt_mask == 0).sum()))  # pad ids differ: the states may not
    return {"ids": ids, "completion": completion, "tool": tool, "prompt_ids": prompt_ids, "prompt_mask": prompt_mask}


def plain_runs(row: list[bool]) -> list[tuple[int, int]]:
    runs, start = [], None
    for t, on in enumerate([*row, False]):
        if on and start is None:
            start = t
        if not on and start is not None:
            runs.append((start, t))
            start = None
    return runs


def as_bytes(ids: list[int]) -> bytes:
    return np.array(ids, dtype=np.int64).tobytes()


def plain_rows(batch: dict[str, np.ndarray], with_tool: bool) -> tuple[list[list[tuple[int, int]]], list[bool], list[list[Hashable]]]:
    """Each row's runs of model tokens, whether it has a token, and the anchor state of each of its steps, by walking it."""
    runs, has, states = [], [], []
    for b in range(batch["ids"].shape[0]):
        completion = [float(v) != 0 for v in batch["completion"][b]]
        tool = [float(v) != 0 for v in batch["tool"][b]] if with_tool else [True] * len(completion)
        row_runs = plain_runs([c and t for c, t in zip(completion, tool, strict=True)])
        prompt = [int(i) for i, m in zip(batch["prompt_ids"][b], batch["prompt_mask"][b], strict=True) if m != 0]
        ids = [int(i) for i in batch["ids"][b]]
        runs.append(row_runs)
        has.append(any(completion))
        states.append([(PROMPT, as_bytes(prompt))] + [as_bytes(ids[row_runs[k - 1][1] : row_runs[k][0]]) for k in range(1, len(row_runs))])
    return runs, has, states


def describe(batch: dict[str, np.ndarray], with_tool: bool, cuts: list[int], overrides: list[dict] | None = None):
    """Each part ``cuts[i]:cuts[i + 1]`` described as one process does it; the parts joined as every process does after the gather."""
    parts, turns = [], []
    for a, b in itertools.pairwise(cuts):
        found = local_turns(batch["completion"][a:b], batch["tool"][a:b] if with_tool else None)
        part_overrides = None if overrides is None else overrides[a:b]
        rows = row_turns(
            batch["ids"][a:b],
            batch["completion"][a:b],
            found,
            part_overrides,
            with_anchors=True,
            prompt_ids=batch["prompt_ids"][a:b],
            prompt_mask=batch["prompt_mask"][a:b],
        )
        parts.append(rows)
        turns.append(found)
    return RowTurns.concat(parts), turns


def plain_anchor_ids(states: list[Hashable], groups: list[int]) -> np.ndarray:
    """Equal (group, state) pairs share an id; ids ordered by group, then by where the state first appears in the batch."""
    rank: dict[Hashable, int] = {}
    for state in states:
        rank.setdefault(state, len(rank))
    keys = sorted({(g, rank[s]) for g, s in zip(groups, states, strict=True)})
    number = {key: i for i, key in enumerate(keys)}
    return np.array([number[(g, rank[s])] for g, s in zip(groups, states, strict=True)], dtype=np.int64)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("with_tool", [True, False])
@pytest.mark.parametrize("block", [1, 7, None])
def test_turns_and_states_of_hostile_rows_are_those_of_a_plain_walk_over_every_split_and_block(monkeypatch, seed, with_tool, block):
    rng = np.random.default_rng(seed)
    batch = hostile_batch(rng, 12, int(rng.integers(1, 9)), int(rng.integers(0, 4)))
    batch["completion"] = batch["completion"].astype(DTYPES[seed % len(DTYPES)])
    batch["tool"] = batch["tool"].astype(DTYPES[(seed + 2) % len(DTYPES)])
    if block is not None:
        monkeypatch.setattr(turns_module, "_BLOCK_ENTRIES", block)
    runs, has, states = plain_rows(batch, with_tool)
    for cuts in ([0, 12], [0, 4, 12], [0, 2, 6, 12]):
        rows, found = describe(batch, with_tool, cuts)
        got_runs = []
        for part in found:
            got_runs += [list(zip(part.start[part.row == r].tolist(), part.end[part.row == r].tolist(), strict=True)) for r in range(part.per_row.size)]
        assert got_runs == runs
        assert rows.num_turns.tolist() == [len(r) for r in runs]
        assert rows.has_tokens.tolist() == has
        assert rows.masked.tolist() == [not r and not h for r, h in zip(runs, has, strict=True)]
        assert rows.idle.tolist() == [not r and h for r, h in zip(runs, has, strict=True)]
        assert rows.step_states() == [s for row in states for s in row]
        distinct = {}
        for code, state in zip(rows.codes.tolist(), rows.step_states(), strict=True):  # equal codes exactly for equal states
            assert distinct.setdefault(state, code) == code
        assert len(set(distinct.values())) == len(distinct)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("anchor_overrides", [False, True])
def test_gigpo_on_joined_rows_is_gigpo_on_the_plain_states_and_its_tokens_are_each_turns_value(seed, anchor_overrides):
    rng = np.random.default_rng(seed)
    batch = hostile_batch(rng, 12, int(rng.integers(1, 9)), int(rng.integers(0, 4)))
    runs, has, states = plain_rows(batch, True)
    overrides = None
    if anchor_overrides:  # strings on some rows with a turn: the states are hashed, not coded
        overrides = [{ANCHOR_STATES_KEY: [f"s{k % 2}" for k in range(len(r))]} if r and b % 2 else {} for b, r in enumerate(runs)]
        states = [[f"s{k % 2}" for k in range(len(runs[b]))] if o else states[b] for b, o in enumerate(overrides)]
    rewards = rng.integers(0, 3, 12).astype(np.float64)
    rewards[3] = np.nan
    scored = [not np.isnan(rewards[b]) and (bool(runs[b]) or not has[b]) for b in range(12)]
    steps = [max(len(r), 1) for r in runs]
    kept = [b for b in range(12) if scored[b]]
    kept_states = [s for b in kept for s in states[b]]
    kept_groups = [b // 2 for b in kept for _ in states[b]]
    anchors = plain_anchor_ids(kept_states, kept_groups)
    step_rewards = np.array([r if k == steps[b] - 1 else 0.0 for b in kept for k, r in enumerate([rewards[b]] * steps[b])])
    traj_offsets = np.array([0] + [sum(1 for b in kept if b // 2 < g + 1) for g in range(6)])
    step_offsets = np.concatenate([[0], np.cumsum([steps[b] for b in kept])])
    want = gigpo(StepBatch(rewards[kept], traj_offsets, step_rewards, step_offsets, anchors, kept_states), gamma=0.9)
    for cuts in ([0, 12], [0, 6, 12], [0, 2, 8, 12]):
        rows, found = describe(batch, True, cuts, overrides)
        result = step_advantages(rows, rewards, 2, "gigpo", {"gamma": 0.9})
        assert np.array_equal(result.anchors, anchors)
        assert result.scored.tolist() == scored
        per_step = result.values[np.repeat(result.scored, np.diff(result.offsets))]
        assert per_step.tobytes() == want.tobytes()
        for part, first in zip(found, cuts[:-1], strict=True):
            tokens = spread_local(result, rows, first, part)
            plain = np.zeros(tokens.shape, dtype=np.float32)
            for r in range(tokens.shape[0]):
                for k, (start, end) in enumerate(runs[first + r]):
                    plain[r, start:end] = result.values[result.offsets[first + r] + k]
            assert tokens.dtype == np.float32 and tokens.tobytes() == plain.tobytes()


def small_rows(with_anchors: bool = True):
    completion = np.ones((2, 3), dtype=np.int64)
    tool = np.array([[1, 0, 1], [1, 1, 1]])
    found = local_turns(completion, tool)
    prompts = np.ones((2, 2), dtype=np.int64)
    return row_turns(np.zeros((2, 3)), completion, found, None, with_anchors=with_anchors, prompt_ids=prompts, prompt_mask=prompts), found


def test_bad_descriptions_are_refused_with_what_and_how_to_fix():
    completion = np.ones((2, 3), dtype=np.int64)
    with pytest.raises(ValueError, match=r"^tool_mask has shape \(2, 2\), completion_mask \(2, 3\); both must be \(batch, completion_length\)$"):
        local_turns(completion, np.ones((2, 2)))
    found = local_turns(completion, None)
    prompts = np.ones((2, 2), dtype=np.int64)
    with pytest.raises(ValueError, match=r"^row_turns: 1 input dicts for 2 completions; give one per completion$"):
        row_turns(np.zeros((2, 3)), completion, found, [{}], with_anchors=True, prompt_ids=prompts, prompt_mask=prompts)
    with pytest.raises(ValueError, match=r"must be one 2-D \(batch, prompt_length\) shape$"):
        row_turns(np.zeros((2, 3)), completion, found, None, with_anchors=True, prompt_ids=prompts, prompt_mask=np.ones((2, 3)))
    rows, found = small_rows()
    with pytest.raises(ValueError, match=r"^spread_local: the turns of rows 0:1 are not those the rows were described with$"):
        spread_local(step_advantages(rows, np.ones(2), 2, "gigpo", {}), rows, 0, local_turns(np.ones((1, 3)), None))
    bare, _ = small_rows(with_anchors=False)
    with pytest.raises(ValueError, match=r"reads anchor states, and the completions were described without them \(row_turns\(\.\.\., with_anchors=False\)\)$"):
        step_advantages(bare, np.ones(2), 2, "gigpo", {})
    with pytest.raises(ValueError, match=r"^RowTurns.concat: some rows were described with anchor states and some without"):
        RowTurns.concat([rows, bare])


def test_rows_are_described_by_arrays_and_one_entry_per_distinct_state():
    """No Python object per row or per step: counts and codes are arrays, and a state repeated across rows is stored once."""
    rng = np.random.default_rng(3)
    batch = hostile_batch(rng, 12, 8, 3)
    batch["prompt_ids"][:] = batch["prompt_ids"][0]  # one prompt for every row
    batch["prompt_mask"][:] = batch["prompt_mask"][0]
    rows, _ = describe(batch, True, [0, 5, 12])
    assert all(isinstance(a, np.ndarray) for a in (rows.num_turns, rows.has_tokens, rows.codes))
    assert rows.codes.size == int(rows.num_steps.sum())
    _, _, states = plain_rows(batch, True)
    distinct = {s for row in states for s in row}
    assert len(rows.states) == len(set(rows.states)) < rows.codes.size  # each state stored once
    assert set(rows.states) - {PROMPT_ANCHOR} == distinct  # (the row rule's placeholder for turn 0 may stay listed)
