"""turn_grpo's ``value="reward_to_go"`` and ``baseline="leave_one_out"`` (verl RFC #7244's criterion) against plain loops.

Re-stated per task group and turn index: each turn index's population is every trajectory of the task group (one that
ended before it counts 0); a step's per-turn part is the discounted sum, over its own and every later turn index of the
group, of ``(x - baseline) / (population std + eps)``, with ``x`` the trajectory's reward there (0 after its end) and
the baseline the population's mean or the mean of its *other* members.
"""

from __future__ import annotations

import dataclasses
import statistics
from types import MappingProxyType

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.estimators import calculate_turn_grpo_advantages
from rllm_plugins.estimators.turn_grpo import turn_grpo
from rllm_plugins.options import check_estimator_kwargs
from rllm_plugins.registry import get_estimator
from rllm_plugins.steps.batch import StepBatch
from rllm_plugins.testing.matrix import FAST, core_paths, entry_of, run_matrix

EPS = 1e-6


def centred(x, population, *, others, norm, ddof, epsilon=EPS):
    """``x`` (a member of ``population``, listed as ``others`` without it) against the baseline, over the population's std."""
    if len(population) == 1:
        return 0.0
    baseline = statistics.fmean(others) if others is not None else statistics.fmean(population)
    sd = statistics.pstdev(population) if ddof == 0 else statistics.stdev(population)
    return (x - baseline) / (sd + epsilon) if norm else x - baseline


def plain_reward_to_go(outcomes, step_rewards, *, lam=1.0, gamma=1.0, norm=True, baseline="mean", ddof=0, epsilon=EPS):
    loo = baseline == "leave_one_out"
    result = []
    for group_outcomes, group_rewards in zip(outcomes, step_rewards, strict=True):
        n = len(group_outcomes)
        if n == 1:  # grpo's convention: mean 0, std 1 (and RLOO's: a group of one keeps its value)
            episode = [(group_outcomes[0] - 0.0) / (1.0 + epsilon) if norm else group_outcomes[0]]
        else:
            episode = [
                centred(r, group_outcomes, others=group_outcomes[:i] + group_outcomes[i + 1 :] if loo else None, norm=norm, ddof=ddof, epsilon=epsilon)
                for i, r in enumerate(group_outcomes)
            ]
        horizon = max(len(r) for r in group_rewards)
        z = [[0.0] * horizon for _ in range(n)]
        for s in range(horizon):
            population = [list(r)[s] if s < len(r) else 0.0 for r in group_rewards]
            for i in range(n):
                others = population[:i] + population[i + 1 :] if loo else None
                z[i][s] = centred(population[i], population, others=others, norm=norm, ddof=ddof, epsilon=epsilon)
        group = []
        for i, rewards in enumerate(group_rewards):
            steps = []
            for t in range(len(rewards)):
                to_go = sum(gamma ** (s - t) * z[i][s] for s in range(t, horizon))
                steps.append(episode[i] + lam * to_go)
            group.append(steps)
        result.append(group)
    return result


def case(rng, kind):
    """Task groups of the named kind: ``ragged`` lengths, ``single`` (groups of one trajectory), ``equal`` lengths, ``early`` (one
    long trajectory per group, every other ending after one turn)."""
    outcomes, rewards = [], []
    for _ in range(5):
        n = 1 if kind == "single" else int(rng.integers(2, 6))
        if kind == "ragged":
            lengths = rng.integers(1, 6, n)
        elif kind == "equal":
            lengths = np.full(n, int(rng.integers(1, 5)))
        elif kind == "early":
            lengths = np.ones(n, dtype=int)
            lengths[int(rng.integers(0, n))] = int(rng.integers(2, 6))
        else:
            lengths = rng.integers(1, 6, n)
        outcomes.append(rng.choice([0.0, 1.0, 2.0, -0.5], n).tolist())
        rewards.append([rng.choice([0.0, 0.5, 1.0, -1.0, 0.25], int(k)).tolist() for k in lengths])
    return outcomes, rewards


def close(got, want, rel=1e-9):
    for g_got, g_want in zip(got, want, strict=True):
        for t_got, t_want in zip(g_got, g_want, strict=True):
            assert np.asarray(t_got).tolist() == pytest.approx(t_want, rel=rel, abs=1e-9)


@pytest.mark.parametrize("kind", ["ragged", "single", "equal", "early"])
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("baseline", ["mean", "leave_one_out"])
@pytest.mark.parametrize("norm", [True, False])
def test_reward_to_go_equals_the_plain_loops(kind, seed, baseline, norm):
    rng = np.random.default_rng(1000 * seed + len(kind))
    outcomes, rewards = case(rng, kind)
    options = {"lam": float(rng.choice([1.0, 0.5])), "gamma": float(rng.choice([1.0, 0.9, 0.0])), "std_ddof": int(rng.integers(0, 2))}
    got, returned = calculate_turn_grpo_advantages(
        [np.array(o) for o in outcomes], rewards, value="reward_to_go", baseline=baseline, norm_adv_by_std_in_grpo=norm, **options
    )
    want = plain_reward_to_go(outcomes, rewards, norm=norm, baseline=baseline, lam=options["lam"], gamma=options["gamma"], ddof=options["std_ddof"])
    close(got, want)
    close(returned, want)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("value", ["return", "reward"])
@pytest.mark.parametrize("ended", ["absorbing", "present"])
def test_leave_one_out_centres_every_population_on_its_other_members(seed, value, ended):
    """Without the std, leave-one-out is each value minus the mean of the other members of its population, at both levels."""
    rng = np.random.default_rng(seed)
    outcomes, rewards = case(rng, "ragged")
    got, _ = calculate_turn_grpo_advantages(
        [np.array(o) for o in outcomes], rewards, value=value, ended=ended, baseline="leave_one_out", norm_adv_by_std_in_grpo=False, lam=0.5
    )
    for g, (group_outcomes, group_rewards) in enumerate(zip(outcomes, rewards, strict=True)):
        for i, steps in enumerate(group_rewards):
            others = [o for j, o in enumerate(group_outcomes) if j != i]
            episode = group_outcomes[i] - statistics.fmean(others) if others else group_outcomes[i]
            for t in range(len(steps)):
                mine = sum(steps[t:]) if value == "return" else steps[t]
                population = []
                for j, theirs in enumerate(group_rewards):
                    if j != i and (t < len(theirs) or ended == "absorbing"):
                        population.append((sum(theirs[t:]) if value == "return" else theirs[t]) if t < len(theirs) else 0.0)
                per_turn = mine - statistics.fmean(population) if population else 0.0
                assert got[g][i][t] == pytest.approx(episode + 0.5 * per_turn, rel=1e-9, abs=1e-12)


def test_without_the_std_and_undiscounted_reward_to_go_is_the_absorbing_return():
    rng = np.random.default_rng(5)
    outcomes, rewards = case(rng, "ragged")
    outcomes = [np.array(o) for o in outcomes]
    for baseline in ("mean", "leave_one_out"):
        to_go, _ = calculate_turn_grpo_advantages(outcomes, rewards, value="reward_to_go", baseline=baseline, norm_adv_by_std_in_grpo=False)
        returns, _ = calculate_turn_grpo_advantages(outcomes, rewards, value="return", baseline=baseline, norm_adv_by_std_in_grpo=False)
        close(to_go, returns)


def test_a_trajectory_that_stops_early_still_carries_the_later_turns_terms():
    """The number of terms is the task group's, not the trajectory's: stopping after one turn keeps turn 2's baseline term."""
    got, _ = calculate_turn_grpo_advantages([[0.0, 0.0]], [[[1.0], [1.0, 2.0]]], value="reward_to_go", baseline="leave_one_out", norm_adv_by_std_in_grpo=False)
    # turn 0: 1 - 1 = 0 for both; turn 1: the short one's 0 - 2 = -2, the long one's 2 - 0 = 2
    assert got[0][0].tolist() == [-2.0]
    assert got[0][1].tolist() == [2.0, 2.0]


def test_magnitudes_near_the_float64_range_give_the_unit_scale_numbers():
    """Rewards of about 1e301: the variance overflows and the written-out path runs; scaled by a power of two, the numbers match."""
    rng = np.random.default_rng(3)
    outcomes, rewards = case(rng, "ragged")
    big = 2.0**1000
    unit, _ = calculate_turn_grpo_advantages([np.array(o) for o in outcomes], rewards, value="reward_to_go", baseline="leave_one_out")
    scaled, _ = calculate_turn_grpo_advantages(
        [np.array(o) * big for o in outcomes],
        [[np.array(r) * big for r in group] for group in rewards],
        value="reward_to_go",
        baseline="leave_one_out",
        epsilon=1e-6 * big,
    )
    close(scaled, unit, rel=1e-9)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"value": "reward_to_go", "ended": "present"}, r"value='reward_to_go' sums .* needs ended='absorbing' .* got ended='present'"),
        ({"baseline": "loo"}, r"baseline must be one of \['mean', 'leave_one_out'\], got 'loo'"),
        ({"baseline": 1}, r"must be a str"),
    ],
)
def test_bad_options_are_refused_at_config_time(options, message):
    with pytest.raises(ValueError, match=message):
        check_estimator_kwargs(
            {"turn_grpo": get_estimator("turn_grpo")}, options, where="algorithm.rllm_estimator_kwargs", norm_field="norm_adv_by_std_in_grpo"
        )
    groups = [TrajectoryGroup([Trajectory(steps=[Step(reward=1.0)], reward=1.0)], group_id="t:agent")]
    with pytest.raises(ValueError, match=message):
        collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="turn_grpo", estimator_kwargs=options))


def test_the_collector_runs_the_option_by_name():
    steps = [[Step(reward=1.0)], [Step(reward=1.0), Step(reward=2.0)]]
    groups = [TrajectoryGroup([Trajectory(steps=s, reward=sum(x.reward for x in s)) for s in steps], group_id="t:agent")]
    options = {"value": "reward_to_go", "baseline": "leave_one_out"}
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="turn_grpo", estimator_kwargs=options, norm_adv_by_std_in_grpo=False))
    got = [[s.advantage for s in t.steps] for t in groups[0].trajectories]
    want = plain_reward_to_go([[1.0, 3.0]], [[[1.0], [1.0, 2.0]]], norm=False, baseline="leave_one_out")[0]
    assert got == [pytest.approx(w) for w in want]


@pytest.mark.parametrize(
    "options", [{"value": "reward_to_go", "baseline": "leave_one_out"}, {"value": "return", "ended": "present", "baseline": "leave_one_out"}]
)
def test_the_options_hold_every_cell_of_the_core_matrix(options):
    """The conformance matrix runs turn_grpo with its defaults; these settings take its core paths and relations too."""
    entry = dataclasses.replace(entry_of("turn_grpo"), options=MappingProxyType(options))
    cells = run_matrix([entry], core_paths(), FAST)
    assert not [str(c) for c in cells if c.status == "FAIL"]
    assert sum(c.status == "PASS" for c in cells) > 20


@pytest.mark.parametrize(
    "traj_offsets, step_rewards, step_offsets, baseline, message",
    [
        ([0, 1, 3], [0.0, 1.5e308, 1.5e308, 1.5e308, 0.0], [0, 1, 4, 5], "mean", r"the discounted return of trajectory 1 \(in batch order\), step 0 is beyond"),
        (
            [0, 1, 3],
            [0.0, 1.5e308, 1.5e308, 1.5e308, 1.5e308, 0.0],
            [0, 1, 5, 6],
            "leave_one_out",
            r"'turn_grpo' \(value='reward_to_go'\): task group 1: the sum of its turns' terms after a trajectory's end is beyond the float64",
        ),
        ([0, 2, 3], [1.5e308, -1.5e308, 0.0], [0, 1, 2, 3], "leave_one_out", r"\(value='reward_to_go'\): trajectory 0 \(in batch order\), step 0: the sum"),
    ],
)
def test_sums_beyond_the_float64_range_are_refused_naming_where(traj_offsets, step_rewards, step_offsets, baseline, message):
    batch = StepBatch(np.zeros(3), np.array(traj_offsets), np.array(step_rewards), np.array(step_offsets))
    with pytest.raises(ValueError, match=message):
        turn_grpo(batch, value="reward_to_go", baseline=baseline, norm_adv_by_std_in_grpo=False)
