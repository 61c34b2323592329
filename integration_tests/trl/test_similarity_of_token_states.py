"""TRL multi-turn ``gigpo`` with ``anchor_similarity``: the environment tokens before a turn compare as token sequences.

Through the adapter's own turn path (turns from the completion and tool masks, anchor states from the ids). Before,
the states were compared as the bytes of their int64 ids: ``(1, 2, 3, 4)`` and ``(5, 6, 7, 8)``, which share no
token, scored 0.875 and formed one anchor group.
"""

from __future__ import annotations

import statistics
from difflib import SequenceMatcher

import numpy as np
import pytest
from rllm_trl.turns import local_turns, row_turns, spread_local, step_advantages

ENV = [(1, 2, 3, 4), (5, 6, 7, 8), (1, 2, 3, 4), (1, 2, 3, 9)]  # the tool's tokens before each completion's second turn
REWARDS = [1.0, 0.0, 0.5, 2.0]  # one reward per completion, on its last turn
THRESHOLD = 0.75  # (1, 2, 3, 9) vs (1, 2, 3, 4): 0.75; (5, 6, 7, 8) vs (1, 2, 3, 4): 0 (as bytes: 0.875)
EPS = 1e-6


def plain_clusters() -> list[int]:
    firsts: list[tuple[int, ...]] = []
    out = []
    for env in ENV:
        match = next((c for c, first in enumerate(firsts) if SequenceMatcher(None, env, first).ratio() >= THRESHOLD), None)
        if match is None:
            firsts.append(env)
            match = len(firsts) - 1
        out.append(match)
    return out


def plain_gigpo() -> list[tuple[float, float]]:
    """Per completion, (turn 0, turn 1): episode GRPO plus the turn's return (gamma 1: the reward) against its anchor group."""
    mean, sd = statistics.fmean(REWARDS), statistics.pstdev(REWARDS)
    episode = [(r - mean) / (sd + EPS) for r in REWARDS]
    clusters = plain_clusters()

    def step(members: list[float], value: float) -> float:
        return 0.0 if len(members) == 1 else (value - statistics.fmean(members)) / (statistics.pstdev(members) + EPS)

    out = []
    for b, reward in enumerate(REWARDS):
        same = [REWARDS[q] for q in range(len(REWARDS)) if clusters[q] == clusters[b]]
        out.append((episode[b] + step(REWARDS, reward), episode[b] + step(same, reward)))  # turn 0: the shared prompt
    return out


def test_similarity_anchors_in_trl_compare_token_sequences():
    assert plain_clusters() == [0, 1, 0, 0]
    ids = np.array([[100, 100, *env, 101, 101] for env in ENV])
    completion = np.ones_like(ids)
    tool = np.array([[1, 1, 0, 0, 0, 0, 1, 1]] * len(ENV))
    prompts = np.full((len(ENV), 2), 7)
    turns = local_turns(completion, tool)
    rows = row_turns(ids, completion, turns, [{} for _ in ENV], with_anchors=True, prompt_ids=prompts, prompt_mask=np.ones_like(prompts))
    result = step_advantages(rows, np.array(REWARDS), len(ENV), "gigpo", {"anchor_similarity": THRESHOLD})
    got = spread_local(result, rows, 0, turns)
    want = plain_gigpo()
    assert got[:, [0, 6]].ravel().tolist() == pytest.approx([a for pair in want for a in pair], rel=1e-5, abs=1e-6)
