"""Property-based tests of the built-ins over random group structures."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups, get_rllm_adv_estimator
from rllm_plugins.estimators import BUILTIN_SPECS
from rllm_plugins.registry import get_estimator
from rllm_plugins.segments import offsets_from_sizes

BUILTINS = [spec.name for spec in BUILTIN_SPECS if spec.level == "outcome" and not spec.stateful]  # step-level: tests/steps; stateful: test_rae_*
reward = st.floats(min_value=-100, max_value=100, allow_nan=False).map(lambda x: round(x, 3))
groups_of = st.lists(st.lists(reward, min_size=1, max_size=12), min_size=1, max_size=8)


def as_arrays(groups):
    return [np.array(g, dtype=np.float64) for g in groups]


def lengths_for(groups):
    return np.arange(1, sum(map(len, groups)) + 1, dtype=np.float64)


@settings(max_examples=60, deadline=None)
@given(groups=st.lists(st.lists(reward, min_size=2, max_size=12), min_size=1, max_size=8), name=st.sampled_from(["grpo", "rloo", "trl_grpo"]))
def test_group_centred_estimators_have_zero_mean_per_group(groups, name):
    advantages, _ = get_rllm_adv_estimator(name)(rewards=as_arrays(groups))
    for a in advantages:
        assert abs(a.mean()) < 1e-6 * max(1.0, np.abs(a).max())


@settings(max_examples=60, deadline=None)
@given(groups=groups_of, name=st.sampled_from(BUILTINS), data=st.data())
def test_permuting_a_group_permutes_its_advantages(groups, name, data):
    rewards = as_arrays(groups)
    g = data.draw(st.integers(0, len(rewards) - 1))
    perm = np.array(data.draw(st.permutations(range(len(rewards[g])))))
    if name in ("opo", "grpo_passk"):  # these depend on lengths / tie order: permute with equal lengths, distinct rewards
        rewards = [r + np.arange(len(r)) * 1e-3 for r in rewards]
    lengths = np.ones(sum(map(len, rewards)))
    permuted = [r[perm] if i == g else r for i, r in enumerate(rewards)]
    fn = get_rllm_adv_estimator(name)
    base, _ = fn(rewards=rewards, lengths=lengths)
    moved, _ = fn(rewards=permuted, lengths=lengths)
    np.testing.assert_allclose(moved[g], base[g][perm], rtol=1e-9, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(groups=groups_of, name=st.sampled_from(BUILTINS), data=st.data())
def test_advantages_do_not_depend_on_group_order(groups, name, data):
    rewards = as_arrays(groups)
    lengths = [np.arange(1, len(r) + 1, dtype=np.float64) for r in rewards]
    order = data.draw(st.permutations(range(len(rewards))))
    fn = get_rllm_adv_estimator(name)
    base, _ = fn(rewards=rewards, lengths=np.concatenate(lengths))
    moved, _ = fn(rewards=[rewards[i] for i in order], lengths=np.concatenate([lengths[i] for i in order]))
    for new_position, i in enumerate(order):
        np.testing.assert_allclose(moved[new_position], base[i], rtol=1e-9, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(groups=groups_of, name=st.sampled_from(BUILTINS), norm=st.booleans())
def test_list_form_equals_batched_form(groups, name, norm):
    rewards = as_arrays(groups)
    estimator = get_estimator(name)
    listed, _ = estimator.list_form(rewards=rewards, lengths=lengths_for(groups), norm_adv_by_std_in_grpo=norm)
    values, offsets = np.concatenate(rewards), offsets_from_sizes([len(r) for r in rewards])
    batched = estimator.batched_form(values, offsets, lengths=lengths_for(groups), norm_adv_by_std_in_grpo=norm)
    np.testing.assert_allclose(np.concatenate(listed), batched, rtol=1e-6, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(groups=groups_of, steps=st.integers(1, 4), name=st.sampled_from(["grpo", "rloo", "reinforce", "reinforce_plus_plus_baseline", "prpo"]))
def test_broadcast_gives_every_step_of_a_trajectory_the_same_value(groups, steps, name):
    traj_groups = [
        TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1]) for _ in range(steps)], reward=r) for r in g], group_id=f"task{i}:role")
        for i, g in enumerate(groups)
    ]
    collect_reward_and_advantage_from_trajectory_groups(traj_groups, AlgorithmConfig(estimator=name))
    expected, _ = get_rllm_adv_estimator(name)(rewards=as_arrays(groups))
    for tg, adv in zip(traj_groups, expected, strict=True):
        for t, a in zip(tg.trajectories, adv, strict=True):
            assert [s.advantage for s in t.steps] == [float(a)] * steps
