"""turn_grpo against a plain re-statement of its formula (loops over turns, ``statistics``), and its relation to gigpo."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.estimators import calculate_gigpo_advantages, calculate_grpo_advantages, calculate_turn_grpo_advantages

EPS = 1e-6


def plain_returns(rewards, gamma):
    out, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def plain_turn_grpo(outcomes, step_rewards, *, lam=1.0, gamma=1.0, value="return", ended="absorbing", norm=True):
    """One task group at a time: the episode's GRPO, then for each turn t its population's mean and population std."""
    result = []
    for group_outcomes, group_rewards in zip(outcomes, step_rewards, strict=True):
        n = len(group_outcomes)
        mean, sd = (0.0, 1.0) if n == 1 else (statistics.fmean(group_outcomes), statistics.pstdev(group_outcomes))
        episode = [(r - mean) / (sd + EPS) if norm else r - mean for r in group_outcomes]
        values = [plain_returns(r, gamma) if value == "return" else list(r) for r in group_rewards]
        population = {}
        for t in range(max(len(v) for v in values)):
            if ended == "present":
                population[t] = [v[t] for v in values if t < len(v)]
            else:  # every trajectory; one that ended before t counts 0
                population[t] = [v[t] if t < len(v) else 0.0 for v in values]
        group = []
        for i, traj in enumerate(values):
            steps = []
            for t, v in enumerate(traj):
                members = population[t]
                if len(members) == 1:
                    per_turn = 0.0
                else:
                    m = statistics.fmean(members)
                    per_turn = (v - m) / (statistics.pstdev(members) + EPS) if norm else v - m
                steps.append(episode[i] + lam * per_turn)
            group.append(steps)
        result.append(group)
    return result


def random_case(rng, num_groups=6):
    outcomes, rewards = [], []
    for _ in range(num_groups):
        n = int(rng.integers(1, 6))
        lengths = rng.integers(1, 6, n)
        outcomes.append(rng.integers(0, 3, n).astype(float).tolist())
        rewards.append([rng.choice([0.0, 0.5, 1.0, -1.0], int(k)).tolist() for k in lengths])
    return outcomes, rewards


def close(got, want):
    assert len(got) == len(want)
    for g_got, g_want in zip(got, want, strict=True):
        for t_got, t_want in zip(g_got, g_want, strict=True):
            assert np.asarray(t_got).tolist() == pytest.approx(t_want, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ended", ["absorbing", "present"])
@pytest.mark.parametrize("value", ["return", "reward"])
@pytest.mark.parametrize("norm", [True, False])
def test_turn_grpo_equals_the_plain_loops(seed, ended, value, norm):
    outcomes, rewards = random_case(np.random.default_rng(seed))
    options = dict(lam=0.7, gamma=0.9, value=value, ended=ended)
    got, returned = calculate_turn_grpo_advantages([np.array(o) for o in outcomes], rewards, norm_adv_by_std_in_grpo=norm, **options)
    close(got, plain_turn_grpo(outcomes, rewards, norm=norm, **options))
    close(returned, plain_turn_grpo(outcomes, rewards, norm=norm, **options))


@pytest.mark.parametrize("seed", range(3))
def test_present_is_gigpo_with_the_turn_index_as_anchor(seed):
    outcomes, rewards = random_case(np.random.default_rng(seed))
    anchors = [[list(range(len(r))) for r in group] for group in rewards]
    ours, _ = calculate_turn_grpo_advantages(outcomes, rewards, lam=0.5, gamma=0.8, ended="present")
    theirs, _ = calculate_gigpo_advantages(outcomes, rewards, anchors, step_advantage_w=0.5, gamma=0.8)
    close(ours, [[np.asarray(t).tolist() for t in g] for g in theirs])


def test_absorbing_counts_an_ended_trajectory_as_0_at_later_turns():
    # two trajectories; the second ended after turn 0. Turn 1's population: {2, 0} (absorbing) or {2} alone (present)
    outcomes, rewards = [[1.0, 1.0]], [[[0.0, 2.0], [0.0]]]
    absorbing, _ = calculate_turn_grpo_advantages(outcomes, rewards, value="reward", norm_adv_by_std_in_grpo=False)
    present, _ = calculate_turn_grpo_advantages(outcomes, rewards, value="reward", ended="present", norm_adv_by_std_in_grpo=False)
    assert absorbing[0][0].tolist() == [0.0, 1.0]  # 2 - mean(2, 0)
    assert present[0][0].tolist() == [0.0, 0.0]  # alone at turn 1


def test_the_absorbing_baseline_of_a_turn_does_not_move_when_a_trajectory_ends_earlier():
    # the first trajectory's turn-1 value and the group's outcomes are fixed; the second ends after turn 1 or after turn 2
    short = calculate_turn_grpo_advantages([[1.0, 0.0]], [[[0.0, 1.0], [0.0, 0.0]]], value="reward")[0]
    longer = calculate_turn_grpo_advantages([[1.0, 0.0]], [[[0.0, 1.0], [0.0, 0.0, 0.0]]], value="reward")[0]
    assert short[0][0].tolist() == longer[0][0].tolist()


@pytest.mark.parametrize("ended", ["absorbing", "present"])
def test_single_turn_trajectories_give_one_plus_lam_times_grpo(ended):
    outcomes = [np.array([1.0, 0.0, 0.5]), np.array([2.0, 2.0])]
    rewards = [[[1.0], [0.0], [0.5]], [[2.0], [2.0]]]
    got, _ = calculate_turn_grpo_advantages(outcomes, rewards, lam=0.5, ended=ended)
    grpo, _ = calculate_grpo_advantages(outcomes)
    for g in range(2):
        assert [a[0] for a in got[g]] == pytest.approx((1.5 * grpo[g]).tolist(), rel=1e-12)


def test_a_group_of_one_trajectory_gets_only_its_episode_part():
    got, _ = calculate_turn_grpo_advantages([[3.0]], [[[1.0, 2.0]]])
    assert got[0][0].tolist() == [3.0 / (1.0 + EPS)] * 2


def test_equal_values_at_a_turn_give_exactly_0():
    got, _ = calculate_turn_grpo_advantages([[0.1, 0.1, 0.1]], [[[0.1, 0.3], [0.1, 0.3], [0.1, 0.3]]])
    assert [a.tolist() for a in got[0]] == [[0.0, 0.0]] * 3


def test_the_collector_runs_turn_grpo_by_name():
    groups = [
        TrajectoryGroup(
            [Trajectory(steps=[Step(reward=0.0), Step(reward=1.0)], reward=1.0), Trajectory(steps=[Step(reward=0.0)], reward=0.0)], group_id="t:agent"
        )
    ]
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="turn_grpo", estimator_kwargs={"lam": 0.5}))
    got = [[s.advantage for s in t.steps] for t in groups[0].trajectories]
    want = plain_turn_grpo([[1.0, 0.0]], [[[0.0, 1.0], [0.0]]], lam=0.5)[0]
    assert got == [pytest.approx(w, rel=1e-12) for w in want]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"value": "returns"}, r"value must be one of \['return', 'reward', 'reward_to_go'\], got 'returns'"),
        ({"ended": "absorb"}, r"ended must be one of \['absorbing', 'present'\], got 'absorb'"),
        ({"lam": float("nan")}, r"option 'lam' of estimator 'turn_grpo' must be finite"),
        ({"gamma": 1.5}, r"gamma \(the discount of step returns\) must be a number in \[0, 1\]"),
        ({"lamb": 0.5}, r"unknown option 'lamb' for estimator 'turn_grpo'.*Did you mean 'lam'\?"),
    ],
)
def test_bad_options_are_refused_when_the_config_is_checked(options, message):
    groups = [TrajectoryGroup([Trajectory(steps=[Step(reward=1.0)], reward=1.0)], group_id="t:agent")]
    with pytest.raises(ValueError, match=message):
        collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="turn_grpo", estimator_kwargs=options))


@pytest.mark.parametrize("dtype", [np.float16, np.int64, bool])
def test_other_reward_dtypes_give_the_float64_numbers(dtype):
    outcomes = [np.array([1, 0, 1], dtype=dtype)]
    rewards = [[np.array([0, 1], dtype=dtype), np.array([0], dtype=dtype), np.array([1, 1, 0], dtype=dtype)]]
    got, _ = calculate_turn_grpo_advantages(outcomes, rewards)
    plain = [[[float(x) for x in t] for t in g] for g in rewards]
    close(got, plain_turn_grpo([[float(x) for x in outcomes[0]]], plain))
