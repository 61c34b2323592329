"""Similarity grouping compares what a state means: token ids as a sequence of ids, long text without difflib's autojunk."""

from __future__ import annotations

import random
from difflib import SequenceMatcher

import numpy as np

from rllm_plugins.steps.anchors import TokenIds, anchor_ids
from rllm_plugins.steps.similarity import similar_anchor_ids


def clusters(states: list[object], threshold: float) -> list[int]:
    ids = anchor_ids(states, [0] * len(states), "step {}".format)
    return similar_anchor_ids(ids, states, np.zeros(len(states), dtype=np.int64), threshold).tolist()


def test_token_ids_that_share_no_token_are_not_similar():
    a, b = TokenIds.of(np.array([1, 2, 3, 4])), TokenIds.of(np.array([5, 6, 7, 8]))
    assert SequenceMatcher(None, bytes(a), bytes(b)).ratio() == 0.875  # what comparing their bytes gave
    assert clusters([a, b], 0.8) == [0, 1]


def test_token_ids_compare_as_the_tuple_of_ids():
    rng = np.random.default_rng(0)
    for _ in range(50):
        x, y = rng.integers(0, 6, int(rng.integers(1, 9))), rng.integers(0, 6, int(rng.integers(1, 9)))
        ratio = SequenceMatcher(None, tuple(y.tolist()), tuple(x.tolist()), autojunk=False).ratio()  # (state, first member)
        for threshold in (0.3, 0.5, 0.8):
            assert clusters([TokenIds.of(x), TokenIds.of(y)], threshold)[1] == (0 if ratio >= threshold else 1)


def test_a_prompt_state_compares_its_ids_after_its_tag():
    a, b = ("<prompt>", TokenIds.of(np.arange(10))), ("<prompt>", TokenIds.of(np.arange(10, 20)))
    assert clusters([a, b], 0.5) == [0, 1]  # only the tag is shared: 2 * 1 / 22
    c = ("<prompt>", TokenIds.of(np.array([*range(9), 99])))
    assert clusters([a, c], 0.9) == [0, 0]  # 2 * 10 / 22


def test_long_text_states_that_differ_in_one_character_are_similar():
    rng = random.Random(0)
    text = "".join(rng.choice("abcdefgh ") for _ in range(5000))
    other = text[:2500] + "Z" + text[2501:]
    assert SequenceMatcher(None, text, other).ratio() < 0.6  # difflib's autojunk drops the popular characters
    assert clusters([text, other], 0.95) == [0, 0]
