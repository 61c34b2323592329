"""gigpo against a plain re-statement of its formulas (loops, dicts, ``statistics``), and verl-agent's variant."""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pytest

from rllm_plugins.estimators import calculate_gigpo_advantages, gigpo
from rllm_plugins.steps import discounted_returns
from rllm_plugins.steps.forms import batch_from_lists

EPS = 1e-6


def plain_returns(rewards, gamma):
    out, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def plain_gigpo(outcomes, step_rewards, anchors, *, gamma=1.0, w=1.0, norm=True, episode_stats="trajectory", ddof=0):
    """One task group at a time, as the paper writes it; ``outcomes[g][i]``, ``step_rewards[g][i][t]``, ``anchors[g][i][t]``."""
    std = statistics.pstdev if ddof == 0 else statistics.stdev
    result = []
    for group_outcomes, group_rewards, group_anchors in zip(outcomes, step_rewards, anchors, strict=False):
        entries = list(group_outcomes) if episode_stats == "trajectory" else [r for r, steps in zip(group_outcomes, group_rewards, strict=False) for _ in steps]
        if len(entries) == 1:
            mean, sd = 0.0, 1.0
        else:
            mean, sd = statistics.fmean(entries), std(entries)
        episode = [(r - mean) / (sd + EPS) if norm else r - mean for r in group_outcomes]
        returns = [plain_returns(r, gamma) for r in group_rewards]
        by_anchor = {}
        for i, traj_anchors in enumerate(group_anchors):
            for t, a in enumerate(traj_anchors):
                by_anchor.setdefault(a, []).append(returns[i][t])
        group = []
        for i, traj_anchors in enumerate(group_anchors):
            values = []
            for t, a in enumerate(traj_anchors):
                members = by_anchor[a]
                if len(members) == 1:
                    step = 0.0
                else:
                    m = statistics.fmean(members)
                    step = (returns[i][t] - m) / (std(members) + EPS) if norm else returns[i][t] - m
                values.append(episode[i] + w * step)
            group.append(values)
        result.append(group)
    return result


def random_case(rng, num_groups=6):
    outcomes, rewards, anchors = [], [], []
    for _ in range(num_groups):
        n = int(rng.integers(1, 6))
        lengths = rng.integers(1, 6, n)
        outcomes.append(rng.integers(0, 3, n).astype(float).tolist())
        rewards.append([rng.choice([0.0, 0.5, 1.0], int(k)).tolist() for k in lengths])
        anchors.append([[f"s{int(x)}" for x in rng.integers(0, 4, int(k))] for k in lengths])
    return outcomes, rewards, anchors


def as_lists(nested):
    return [[np.asarray(t).tolist() for t in g] for g in nested]


def close(got, want):
    for g_got, g_want in zip(got, want, strict=True):
        for t_got, t_want in zip(g_got, g_want, strict=True):
            assert t_got == pytest.approx(t_want, rel=1e-9, abs=1e-9)


def test_the_worked_example_of_the_docs():
    # one task, two trajectories; both start in 'start', the first reaches 'door' and succeeds
    advantages, returns = calculate_gigpo_advantages(
        rewards=[np.array([1.0, 0.0])],
        step_rewards=[[np.array([0.0, 1.0]), np.array([0.0, 0.0])]],
        anchor_states=[[["start", "door"], ["start", "start"]]],
        gamma=0.5,
    )
    # A^E = +-1/(0.5+eps)*0.5; returns [0.5, 1] and [0, 0]; anchor 'start' = {0.5, 0, 0}; 'door' alone
    m, sd = 0.5 / 3, math.sqrt(((0.5 - 0.5 / 3) ** 2 + 2 * (0.5 / 3) ** 2) / 3)
    a_e = 0.5 / (0.5 + EPS)
    want = [[[a_e + (0.5 - m) / (sd + EPS), a_e + 0.0], [-a_e + (0 - m) / (sd + EPS), -a_e + (0 - m) / (sd + EPS)]]]
    close(as_lists(advantages), want)
    assert [[round(x, 6) for x in t] for t in as_lists(advantages)[0]] == [[2.414206, 0.999998], [-1.707102, -1.707102]]
    close(as_lists(returns), as_lists(advantages))


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize(("gamma", "w", "norm"), [(1.0, 1.0, True), (0.9, 0.5, True), (0.0, 2.0, False), (0.95, 1.0, False)])
def test_random_groups_equal_the_plain_formulas(seed, gamma, w, norm):
    outcomes, rewards, anchors = random_case(np.random.default_rng(seed))
    got, _ = calculate_gigpo_advantages(
        [np.array(o) for o in outcomes], [[np.array(t) for t in g] for g in rewards], anchors, gamma=gamma, step_advantage_w=w, norm_adv_by_std_in_grpo=norm
    )
    close(as_lists(got), plain_gigpo(outcomes, rewards, anchors, gamma=gamma, w=w, norm=norm))


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("norm", [True, False])
def test_verl_agent_variant_equals_its_formulas(seed, norm):
    """episode_stats='step', std_ddof=1: episode statistics over step rows and torch's unbiased std, in both levels."""
    outcomes, rewards, anchors = random_case(np.random.default_rng(100 + seed))
    got, _ = calculate_gigpo_advantages(
        [np.array(o) for o in outcomes], [[np.array(t) for t in g] for g in rewards], anchors, episode_stats="step", std_ddof=1, norm_adv_by_std_in_grpo=norm
    )
    close(as_lists(got), plain_gigpo(outcomes, rewards, anchors, norm=norm, episode_stats="step", ddof=1))


def test_verl_agent_variant_worked_example_differs_from_the_native_one():
    # a 3-step success and a 1-step failure: over step rows the success counts 3 times
    args = ([np.array([1.0, 0.0])], [[np.array([0.0, 0.0, 1.0]), np.array([0.0])]], [[["a", "b", "c"], ["x"]]])
    native, _ = calculate_gigpo_advantages(*args, norm_adv_by_std_in_grpo=False)
    verl_agent, _ = calculate_gigpo_advantages(*args, norm_adv_by_std_in_grpo=False, episode_stats="step", std_ddof=1)
    assert as_lists(native) == [[[0.5, 0.5, 0.5], [-0.5]]]  # R - mean over trajectories (0.5)
    assert as_lists(verl_agent) == [[[0.25, 0.25, 0.25], [-0.75]]]  # R - mean over step rows (0.75)


def test_torch_unbiased_std_is_what_the_variant_uses():
    torch = pytest.importorskip("torch")
    values = [1.0, 0.0, 0.0, 1.0, 1.0]
    got, _ = calculate_gigpo_advantages([np.array(values)], [[np.array([1.0])] * 5], [[["s"]] * 5], std_ddof=1, step_advantage_w=0.0)
    t = torch.tensor(values, dtype=torch.float64)
    want = ((t - t.mean()) / (t.std() + EPS)).tolist()
    assert np.concatenate(got[0]).tolist() == pytest.approx(want, rel=1e-12)


def test_groups_of_one_trajectory_use_mean_0_and_std_1_and_single_anchors_get_0():
    got, _ = calculate_gigpo_advantages([np.array([3.0]), np.array([-2.0])], [[np.array([1.0, 2.0])], [np.array([5.0])]], [[["a", "b"]], [["a"]]])
    assert as_lists(got) == [[[pytest.approx(3 / (1 + EPS))] * 2], [[pytest.approx(-2 / (1 + EPS))]]]


def test_one_step_trajectories_with_one_anchor_are_grpo_plus_w_times_grpo_of_the_step_rewards():
    rng = np.random.default_rng(3)
    outcomes, steps = rng.normal(size=6), rng.normal(size=6)
    got, _ = calculate_gigpo_advantages([outcomes], [[np.array([s]) for s in steps]], [[["prompt"]] * 6], step_advantage_w=0.5)
    z = lambda v: (v - v.mean()) / (v.std() + EPS)  # noqa: E731
    assert np.concatenate(got[0]) == pytest.approx(z(outcomes) + 0.5 * z(steps), rel=1e-9)


def test_all_equal_returns_give_exactly_the_episode_part():
    got, _ = calculate_gigpo_advantages([np.array([1.0, 0.0, 1.0])], [[np.array([0.1, 0.1])] * 3], [[["s0", "s1"]] * 3], gamma=1.0)
    a_e = np.array([1.0, 0.0, 1.0]) - 2 / 3
    a_e = a_e / (np.std([1.0, 0.0, 1.0]) + EPS)
    assert [t.tolist() for t in got[0]] == [[a_e[0]] * 2, [a_e[1]] * 2, [a_e[2]] * 2]


def test_equal_anchors_in_different_groups_never_meet():
    shared = calculate_gigpo_advantages(
        [np.array([1.0, 0.0]), np.array([5.0, 1.0])], [[np.array([1.0]), np.array([0.0])], [np.array([9.0]), np.array([2.0])]], [[["s"], ["s"]], [["s"], ["s"]]]
    )[0]
    alone = [
        calculate_gigpo_advantages([np.array(o)], [[np.array([r]) for r in rs]], [[["s"], ["s"]]])[0][0]
        for o, rs in [([1.0, 0.0], [1.0, 0.0]), ([5.0, 1.0], [9.0, 2.0])]
    ]
    assert as_lists(shared) == as_lists(alone)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("gamma", [0.0, 0.3, 0.99, 1.0])
@pytest.mark.parametrize("longest", [12, 100])
def test_discounted_returns_equal_the_backward_loop_bit_for_bit(seed, gamma, longest):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, longest, 50)
    rewards = rng.normal(size=int(lengths.sum()))
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    want = [x for a, b in itertools.pairwise(offsets) for x in plain_returns(rewards[a:b].tolist(), gamma)]
    assert discounted_returns(rewards, offsets, gamma).tolist() == want


def test_the_batched_form_refuses_a_batch_without_anchors():
    batch = batch_from_lists([np.array([1.0])], [[np.array([0.0])]], None)
    with pytest.raises(ValueError, match="estimator 'gigpo' needs an anchor state for every step"):
        gigpo(batch)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"gamma": 1.5}, r"gamma \(the discount of step returns\) must be a number in \[0, 1\], got float 1.5"),
        ({"gamma": -0.1}, r"must be a number in \[0, 1\]"),
        ({"episode_stats": "steps"}, r"episode_stats must be one of \['trajectory', 'step'\], got 'steps'"),
        ({"std_ddof": 2}, r"std_ddof must be 0 \(population std\) or 1 \(unbiased std\), got 2"),
        ({"step_advantage_w": math.inf}, r"step_advantage_w must be a finite number"),
    ],
)
def test_bad_options_are_refused_by_the_estimator(options, message):
    with pytest.raises(ValueError, match=message):
        calculate_gigpo_advantages([np.array([1.0])], [[np.array([0.0])]], [[["s"]]], **options)


def test_huge_returns_stay_finite():
    got, _ = calculate_gigpo_advantages([np.array([1e308, -1e308])], [[np.array([1e308]), np.array([-1e308])]], [[["s"], ["s"]]])
    assert np.isfinite(np.concatenate(got[0])).all()
    assert np.concatenate(got[0]) == pytest.approx([2.0, -2.0], rel=1e-5)


@pytest.mark.parametrize("estimator", ["gigpo", "step_reinforce"])
def test_epsilon_0_gives_equal_returns_exactly_0_not_nan(estimator):
    from rllm_plugins.estimators import calculate_step_reinforce_advantages

    step_rewards = [[[1.0, 0.0], [1.0, 0.0]], [[2.0], [2.0]]]  # equal returns within every anchor group and task group
    if estimator == "gigpo":
        advantages, _ = calculate_gigpo_advantages([[1.0, 1.0], [2.0, 2.0]], step_rewards, [[["a", "b"], ["a", "b"]], [["c"], ["c"]]], epsilon=0.0)
    else:
        advantages, _ = calculate_step_reinforce_advantages([[1.0, 1.0], [2.0, 2.0]], [[[0.0, 1.0], [0.0, 1.0]], [[2.0], [2.0]]], epsilon=0.0)
    assert [a.tolist() for group in advantages for a in group] == [[0.0, 0.0], [0.0, 0.0], [0.0], [0.0]]


@pytest.mark.parametrize(
    ("anchors", "message"),
    [
        ([[["s"], ["s"]], [["s"]]], r"anchor_states has 2 groups, rewards 1"),
        ([[["s"]]], r"group 0: anchor_states has 1 trajectories, rewards 2"),
        ([[["s"], ["s", "t"]]], r"group 0, trajectory 1: 2 anchor states for 1 step rewards"),
        ([[["s"], [["unhashable"]]]], r"group 0, trajectory 1, step 0: anchor state list \['unhashable'\] is unhashable"),
    ],
)
def test_the_list_form_names_where_its_anchor_states_do_not_fit(anchors, message):
    with pytest.raises(ValueError, match=message):
        calculate_gigpo_advantages([np.array([1.0, 0.0])], [[np.array([1.0]), np.array([0.0])]], anchors)
