"""``rllm_gigpo`` with ``anchor_similarity`` on verl's legacy path: the clusters do not depend on the order of the rows.

verl's ``_balance_batch`` reorders rows; GiGPO's similarity grouping is first-match greedy, so visiting the rows as
they arrive (verl-agent's way) can cluster the same rollouts differently. Re-stated here: verl-agent's clustering
(``SequenceMatcher(None, state, first).ratio() >= threshold`` against each cluster's first member, visiting steps in
the order given).
"""

from __future__ import annotations

from difflib import SequenceMatcher

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

# a chain: neighbours are similar at 0.8, the ends are not, so the visit order decides the clusters
STATES = ["abcdefghij", "abcdefghXY", "abcdefWXYZ", "abcdVWXYZ!", "klmnopqrst"]


def verl_agent_clusters(states_in_visit_order, threshold):
    clusters, labels = [], []
    for state in states_in_visit_order:
        for c, first in enumerate(clusters):
            if SequenceMatcher(None, state, first).ratio() >= threshold:
                labels.append(c)
                break
        else:
            clusters.append(state)
            labels.append(len(clusters) - 1)
    return labels


def batch(rng, rows=8, length=8):
    """One uid; rows of 1-3 turns (model tokens between tool tokens), each turn anchored at a state of the chain."""
    from verl import DataProto

    mask = torch.zeros(rows, length, dtype=torch.int64)
    states = np.empty(rows, dtype=object)
    for row in range(rows):
        turns = int(rng.integers(1, 4))
        for k in range(turns):
            mask[row, 3 * k : 3 * k + 2] = 1
        states[row] = [STATES[int(i)] for i in rng.integers(0, len(STATES), turns)]
    rewards = torch.zeros(rows, length)
    rewards[torch.arange(rows), 7] = torch.from_numpy(rng.integers(0, 2, rows).astype(np.float32))
    rewards[torch.arange(rows), 1] = torch.from_numpy(rng.integers(0, 2, rows).astype(np.float32))
    uids = np.array(["task"] * rows, dtype=object)
    return DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors={"uid": uids, "anchor_states": states})


def advantages(data):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.ray_trainer import compute_advantage

    config = OmegaConf.create({"gamma": 0.9, "rllm_estimator_kwargs": {"anchor_similarity": 0.8}})
    return compute_advantage(data, adv_estimator="rllm_gigpo", gamma=0.9, config=config).batch["advantages"].clone()


def test_reordering_rows_reorders_the_advantages_and_nothing_else():
    moved = 0
    for seed in range(12):
        rng = np.random.default_rng(seed)
        data = batch(rng)
        before = advantages(data)
        order = rng.permutation(len(data))
        visited = [s for row in order for s in data.non_tensor_batch["anchor_states"][row]]
        in_batch_order = [s for row in range(len(data)) for s in data.non_tensor_batch["anchor_states"][row]]
        moved += len(set(zip(in_batch_order, verl_agent_clusters(in_batch_order, 0.8), strict=True))) != len(
            set(zip(visited, verl_agent_clusters(visited, 0.8), strict=True))
        ) or sorted(verl_agent_clusters(visited, 0.8)) != sorted(verl_agent_clusters(in_batch_order, 0.8))
        data.reorder(torch.from_numpy(order))
        after = advantages(data)
        torch.testing.assert_close(after, before[torch.from_numpy(order)])
    assert moved > 0, "some reorder must change verl-agent's own clusters, or this test shows nothing"


def test_the_legacy_rule_visits_episodes_in_the_order_of_their_anchor_state_sequences():
    from rllm_plugins.estimators import calculate_gigpo_advantages

    data = batch(np.random.default_rng(3))
    got = advantages(data)
    states = list(data.non_tensor_batch["anchor_states"])
    order = sorted(range(len(states)), key=lambda row: tuple(repr(s) for s in states[row]))
    labels = verl_agent_clusters([s for row in order for s in states[row]], 0.8)
    per_row, k = {}, 0
    for row in order:
        per_row[row] = labels[k : k + len(states[row])]
        k += len(states[row])
    rewards = data.batch["token_level_rewards"]
    step_rewards = [
        [
            np.array(
                [
                    float(rewards[row, : 3 * t + 3].sum() - rewards[row, : 3 * t].sum()) if t + 1 < len(states[row]) else float(rewards[row, 3 * t :].sum())
                    for t in range(len(states[row]))
                ]
            )
            for row in range(len(states))
        ]
    ]
    want, _ = calculate_gigpo_advantages([rewards.sum(-1).double().numpy()], step_rewards, [[per_row[row] for row in range(len(states))]], gamma=0.9)
    for row in range(len(states)):
        for t, value in enumerate(want[0][row]):
            assert float(got[row, 3 * t]) == pytest.approx(value, abs=1e-5)
