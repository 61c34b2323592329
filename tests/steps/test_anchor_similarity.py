"""gigpo(anchor_similarity=...): anchor groups of similar states, as verl-agent's build_step_group(enable_similarity=True).

verl-agent (gigpo/core_gigpo.py) re-stated: within a task group, visit the steps in order; a step joins the
first cluster whose first member's observation is similar to its own (``SequenceMatcher(None, obs, first).ratio()
>= threshold``), else it starts a new cluster. Every cluster is one anchor group.
"""

from __future__ import annotations

from difflib import SequenceMatcher

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.estimators import calculate_gigpo_advantages


def verl_agent_clusters(anchors, threshold):
    """``anchors[g][i][t]`` text -> cluster labels of the same shape, one step at a time."""
    labels = []
    for group in anchors:
        clusters = []  # [first member's text]
        group_labels = []
        for traj in group:
            traj_labels = []
            for obs in traj:
                for c, first in enumerate(clusters):
                    if SequenceMatcher(None, obs, first).ratio() >= threshold:
                        traj_labels.append(c)
                        break
                else:
                    clusters.append(obs)
                    traj_labels.append(len(clusters) - 1)
            group_labels.append(traj_labels)
        labels.append(group_labels)
    return labels


ROOMS = ["You are in the kitchen. You see a key.", "You are in the kitchen. You see a kez.", "You are in the hall.", "You are in the hall!", "Nothing"]


def random_case(rng, num_groups=5):
    outcomes, rewards, anchors = [], [], []
    for _ in range(num_groups):
        lengths = rng.integers(1, 5, int(rng.integers(1, 5)))
        outcomes.append(rng.integers(0, 2, lengths.size).astype(float).tolist())
        rewards.append([rng.choice([0.0, 1.0], int(k)).tolist() for k in lengths])
        anchors.append([[ROOMS[int(x)] for x in rng.integers(0, len(ROOMS), int(k))] for k in lengths])
    return outcomes, rewards, anchors


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("threshold", [0.5, 0.9, 0.95, 1.0])
def test_similarity_anchors_equal_gigpo_on_verl_agents_clusters(seed, threshold):
    outcomes, rewards, anchors = random_case(np.random.default_rng(seed))
    got, _ = calculate_gigpo_advantages(outcomes, rewards, anchors, anchor_similarity=threshold, gamma=0.9)
    want, _ = calculate_gigpo_advantages(outcomes, rewards, verl_agent_clusters(anchors, threshold), gamma=0.9)
    assert [t.tolist() for g in got for t in g] == [t.tolist() for g in want for t in g]


def test_similar_states_share_an_anchor_group_and_dissimilar_ones_do_not():
    ratio = SequenceMatcher(None, ROOMS[1], ROOMS[0]).ratio()
    assert 0.95 < ratio < 1.0  # one letter differs
    args = ([[1.0, 0.0]], [[[1.0], [0.0]]], [[[ROOMS[0]], [ROOMS[1]]]])
    equal_only, _ = calculate_gigpo_advantages(*args, norm_adv_by_std_in_grpo=False)
    similar, _ = calculate_gigpo_advantages(*args, norm_adv_by_std_in_grpo=False, anchor_similarity=0.95)
    assert [t.tolist() for t in equal_only[0]] == [[0.5], [-0.5]]  # two lone anchors: step part 0
    assert [t.tolist() for t in similar[0]] == [[1.0], [-1.0]]  # one anchor group: 0.5 + (1 - 0.5)


def test_similar_states_of_different_task_groups_never_meet():
    args = ([[1.0], [0.0]], [[[1.0]], [[0.0]]], [[[ROOMS[0]]], [[ROOMS[1]]]])
    got, _ = calculate_gigpo_advantages(*args, norm_adv_by_std_in_grpo=False, anchor_similarity=0.5)
    assert [g[0].tolist() for g in got] == [[1.0], [0.0]]  # episode part of a group of one, step part 0


def test_token_id_states_are_compared_as_sequences():
    args = ([[1.0, 0.0]], [[[1.0], [0.0]]], [[[(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)], [(1, 2, 3, 4, 5, 6, 7, 8, 9, 11)]]])
    got, _ = calculate_gigpo_advantages(*args, norm_adv_by_std_in_grpo=False, anchor_similarity=0.9)
    assert [t.tolist() for t in got[0]] == [[1.0], [-1.0]]


def test_the_collector_reads_observations_for_similarity():
    groups = [
        TrajectoryGroup(
            [Trajectory(steps=[Step(reward=1.0, observation=ROOMS[0])], reward=1.0), Trajectory(steps=[Step(reward=0.0, observation=ROOMS[1])], reward=0.0)],
            group_id="t:agent",
        )
    ]
    config = AlgorithmConfig(estimator="gigpo", norm_adv_by_std_in_grpo=False, estimator_kwargs={"anchor_similarity": 0.95})
    collect_reward_and_advantage_from_trajectory_groups(groups, config)
    assert [t.steps[0].advantage for t in groups[0].trajectories] == [1.0, -1.0]


@pytest.mark.parametrize("value", [0.0, 1.5, -0.1, "0.9", True])
def test_a_threshold_outside_0_1_is_refused_at_config_time(value):
    groups = [TrajectoryGroup([Trajectory(steps=[Step(reward=1.0, observation="a")], reward=1.0)], group_id="t:agent")]
    with pytest.raises(ValueError, match=r"anchor_similarity must be None \(equal states only\) or a number in \(0, 1\]"):
        collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="gigpo", estimator_kwargs={"anchor_similarity": value}))


def test_a_state_that_is_not_a_sequence_is_refused_naming_the_step():
    with pytest.raises(ValueError, match=r"task group 1, trajectory 1, step 0: anchor_similarity compares anchor states as sequences .* got int 7"):
        calculate_gigpo_advantages([[1.0], [1.0, 0.0]], [[[0.0, 1.0]], [[1.0], [0.0]]], [[["a", "b"]], [["a"], [7]]], anchor_similarity=0.9)


LONG = "You are in a long corridor. " * 12  # 336 characters: difflib's autojunk ignores its popular characters


def long_case(rng, num_groups=6):
    """States of 300+ characters that differ in a few words: where autojunk changes difflib's ratio."""
    variants = [LONG + "A key lies here.", LONG + "A kez lies here.", LONG.replace("long", "wide") + "A key lies here.", "Nothing"]
    outcomes, rewards, anchors = [], [], []
    for _ in range(num_groups):
        lengths = rng.integers(1, 4, int(rng.integers(2, 5)))
        outcomes.append(rng.integers(0, 2, lengths.size).astype(float).tolist())
        rewards.append([rng.choice([0.0, 1.0], int(k)).tolist() for k in lengths])
        anchors.append([[variants[int(x)] for x in rng.integers(0, len(variants), int(k))] for k in lengths])
    return outcomes, rewards, anchors


def test_similarity_autojunk_reproduces_verl_agents_difflib_default_on_long_states_and_differs_without_it():
    """verl-agent calls SequenceMatcher(None, obs, first) with difflib's default autojunk=True; exact ratios (the default,
    similarity_autojunk=False) group long states differently."""
    assert SequenceMatcher(None, LONG + "A key lies here.", LONG.replace("long", "wide") + "A key lies here.").ratio() < 0.5
    assert SequenceMatcher(None, LONG + "A key lies here.", LONG.replace("long", "wide") + "A key lies here.", autojunk=False).ratio() > 0.8
    differs = 0
    for seed in range(20):
        outcomes, rewards, anchors = long_case(np.random.default_rng(seed))
        want, _ = calculate_gigpo_advantages(outcomes, rewards, verl_agent_clusters(anchors, 0.8))
        got, _ = calculate_gigpo_advantages(outcomes, rewards, anchors, anchor_similarity=0.8, similarity_autojunk=True)
        for g, w in zip(got, want, strict=True):
            for a, b in zip(g, w, strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
        exact, _ = calculate_gigpo_advantages(outcomes, rewards, anchors, anchor_similarity=0.8)
        differs += any(not np.allclose(a, b) for g, w in zip(exact, want, strict=True) for a, b in zip(g, w, strict=True))
    assert differs >= 5
