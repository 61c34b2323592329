"""turn_gae against a plain backward loop of GAE over turns, its relations, and how values reach it (``Step.value``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rllm_plugins import AdvEstimatorSpec, AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.estimators import calculate_turn_gae_advantages
from rllm_plugins.estimators.composite import check_composite_options
from rllm_plugins.options import check_estimator_kwargs
from rllm_plugins.registry import get_estimator


def plain_gae(rewards, values, gamma, lam):
    """One trajectory: delta_t = r_t + gamma V_{t+1} - V_t (V after the last turn 0), A_t = delta_t + gamma lam A_{t+1}."""
    advantages, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        following = values[t + 1] if t + 1 < len(rewards) else 0.0
        delta = rewards[t] + gamma * following - values[t]
        running = delta + gamma * lam * running
        advantages[t] = running
    return advantages


def plain_whiten(advantages, weights):
    """verl's masked_whiten over tokens: each step counts ``weights`` times; unbiased variance; rsqrt(var + 1e-8)."""
    total = sum(weights)
    mean = sum(w * a for w, a in zip(weights, advantages, strict=True)) / total
    var = sum(w * (a - mean) ** 2 for w, a in zip(weights, advantages, strict=True)) / total * total / (total - 1)
    return [(a - mean) / math.sqrt(var + 1e-8) for a in advantages]


def random_case(seed):
    rng = np.random.default_rng(seed)
    rewards, values, outcomes = [], [], []
    for _ in range(int(rng.integers(1, 4))):
        lengths = rng.integers(1, 6, size=int(rng.integers(1, 5)))
        rewards.append([rng.normal(size=int(n)).tolist() for n in lengths])
        values.append([rng.normal(size=int(n)).tolist() for n in lengths])
        outcomes.append(np.array([sum(r) for r in rewards[-1]]))
    return outcomes, rewards, values


def flat(nested):
    return np.array([x for group in nested for traj in group for x in np.asarray(traj).tolist()])


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (0.9, 0.95), (0.5, 0.0), (0.0, 0.7)])
def test_turn_gae_equals_a_plain_backward_loop_and_returns_are_advantages_plus_values(seed, gamma, lam):
    outcomes, rewards, values = random_case(seed)
    advantages, returns = calculate_turn_gae_advantages(outcomes, rewards, step_values=values, gamma=gamma, lam=lam, whiten=False)
    want = [[plain_gae(r, v, gamma, lam) for r, v in zip(gr, gv, strict=True)] for gr, gv in zip(rewards, values, strict=True)]
    np.testing.assert_allclose(flat(advantages), flat(want), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(flat(returns), flat(want) + flat(values), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_whiten_standardises_over_tokens_as_verl_gae_does_and_leaves_returns_alone(seed):
    outcomes, rewards, values = random_case(seed + 100)
    rng = np.random.default_rng(seed)
    tokens = [[rng.integers(1, 6, size=len(t)).tolist() for t in g] for g in rewards]
    advantages, returns = calculate_turn_gae_advantages(outcomes, rewards, step_values=values, step_tokens=tokens, gamma=0.9, lam=0.8)
    raw = flat([[plain_gae(r, v, 0.9, 0.8) for r, v in zip(gr, gv, strict=True)] for gr, gv in zip(rewards, values, strict=True)])
    if flat(tokens).sum() > 1:
        np.testing.assert_allclose(flat(advantages), plain_whiten(raw.tolist(), flat(tokens).tolist()), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(flat(returns), raw + flat(values), rtol=1e-12, atol=1e-12)


def test_lam_one_gives_the_return_to_go_minus_the_value():
    rewards, values = [[[0.0, 0.5, 1.0]]], [[[0.2, -0.3, 0.4]]]
    advantages, _ = calculate_turn_gae_advantages([np.array([1.5])], rewards, step_values=values, gamma=0.9, lam=1.0, whiten=False)
    to_go = [0.0 + 0.9 * 0.5 + 0.81 * 1.0, 0.5 + 0.9 * 1.0, 1.0]
    np.testing.assert_allclose(advantages[0][0], np.array(to_go) - np.array([0.2, -0.3, 0.4]), rtol=1e-12)


def test_zero_values_and_lam_one_give_the_discounted_return():
    rewards = [[[1.0, 0.0, 2.0], [3.0]]]
    advantages, returns = calculate_turn_gae_advantages([np.array([3.0, 3.0])], rewards, step_values=[[[0.0] * 3, [0.0]]], gamma=0.5, lam=1.0, whiten=False)
    np.testing.assert_allclose(advantages[0][0], [1.0 + 0.5 * 0.0 + 0.25 * 2.0, 0.0 + 0.5 * 2.0, 2.0])
    np.testing.assert_allclose(advantages[0][1], [3.0])
    np.testing.assert_allclose(returns[0][0], advantages[0][0])


def test_the_collector_reads_step_value_and_weighs_steps_by_their_response_tokens():
    steps = [Step(reward=0.0, value=0.25, response_ids=[1, 2, 3]), Step(reward=1.0, value=0.5, response_ids=[4])]
    group = TrajectoryGroup(
        [Trajectory(steps=steps, reward=1.0), Trajectory(steps=[Step(reward=0.0, value=-0.5, response_ids=[5, 6])], reward=0.0)],
        group_id="task:agent",
    )
    collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(estimator="turn_gae", estimator_kwargs={"gamma": 0.9, "lam": 0.5}))
    raw = plain_gae([0.0, 1.0], [0.25, 0.5], 0.9, 0.5) + plain_gae([0.0], [-0.5], 0.9, 0.5)
    want = plain_whiten(raw, [3, 1, 2])
    got = [step.advantage for traj in group.trajectories for step in traj.steps]
    np.testing.assert_allclose(got, want, rtol=1e-9)
    targets = [step.value_target for traj in group.trajectories for step in traj.steps]
    np.testing.assert_allclose(targets, [a + v for a, v in zip(raw, [0.25, 0.5, -0.5], strict=True)], rtol=1e-12)  # before whitening


def test_the_collector_writes_no_value_target_for_an_estimator_without_a_critic():
    group = TrajectoryGroup([Trajectory(steps=[Step(reward=0.0), Step(reward=1.0)], reward=1.0), Trajectory(steps=[Step(reward=0.0)], reward=0.0)], "t:a")
    collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(estimator="turn_grpo"))
    assert all(step.advantage is not None and step.value_target is None for traj in group.trajectories for step in traj.steps)


def test_a_step_without_a_value_is_named_with_what_to_set():
    group = TrajectoryGroup([Trajectory(steps=[Step(reward=1.0, value=0.5), Step(reward=0.0)], reward=1.0)], group_id="t7:solver")
    with pytest.raises(ValueError, match=r"role 'solver', group 0 .*trajectory 0, step 1: .*'turn_gae'.*Step.value is None.*set Step.value"):
        collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(estimator="turn_gae"))


def test_a_non_finite_value_is_refused_naming_the_step():
    group = TrajectoryGroup([Trajectory(steps=[Step(reward=1.0, value=float("nan"))], reward=1.0)], group_id="t:a")
    with pytest.raises(ValueError, match=r"trajectory 0, step 0: .*critic's value.*nan"):
        collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(estimator="turn_gae"))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"lam": 1.5}, r"lam \(GAE's lambda\) must be a number in \[0, 1\]"),
        ({"whiten": "yes"}, "'whiten' of estimator 'turn_gae' must be a bool"),
        ({"gamma": -0.1}, "gamma"),
    ],
)
def test_bad_options_are_refused_where_options_are_checked(options, message):
    with pytest.raises(ValueError, match=message):
        check_estimator_kwargs({"turn_gae": get_estimator("turn_gae")}, options, where="algorithm.rllm_estimator_kwargs", norm_field="norm_adv_by_std_in_grpo")


def test_without_values_the_list_form_says_what_it_needs():
    with pytest.raises(ValueError, match=r"needs a critic's value for every step.*Step.value.*critic.enable=true"):
        calculate_turn_gae_advantages([np.array([1.0])], [[[1.0]]])


def test_needs_values_is_declared_and_only_for_step_level_estimators():
    assert get_estimator("turn_gae").spec.needs_values
    assert not get_estimator("gigpo").spec.needs_values
    with pytest.raises(ValueError, match=r"needs_values=True \(a value per step\) needs level='step'"):
        AdvEstimatorSpec("valued", batched=lambda values, offsets, **kw: values, needs_values=True)
    with pytest.raises(ValueError, match="needs_values must be a bool"):
        AdvEstimatorSpec("valued", batched=lambda batch, **kw: batch.step_rewards, level="step", needs_values=1)


def test_a_plugin_list_form_gets_values_and_its_returns_reach_the_batched_form():
    def critic_plugin(rewards, step_rewards, anchor_states=None, step_values=None, step_tokens=None, **_):
        advantages = [[np.asarray(r) - np.asarray(v) for r, v in zip(gr, gv, strict=True)] for gr, gv in zip(step_rewards, step_values, strict=True)]
        returns = [[np.asarray(r) for r in gr] for gr in step_rewards]
        return advantages, returns

    spec = AdvEstimatorSpec("critic_plugin", fn=critic_plugin, level="step", needs_values=True)
    from rllm_plugins.steps.forms import batch_from_lists

    batch = batch_from_lists([np.array([1.0, 0.0])], [[np.array([1.0, 2.0]), np.array([3.0])]], None, [[np.array([0.5, 0.5]), np.array([1.0])]])
    advantages, returns = spec.batched_form(batch)
    np.testing.assert_allclose(advantages, [0.5, 1.5, 2.0])
    np.testing.assert_allclose(returns, [1.0, 2.0, 3.0])


def test_a_composite_refuses_a_value_based_term():
    with pytest.raises(ValueError, match=r"term 0 \('turn_gae'\) reads a critic's value per step"):
        check_composite_options({"terms": [["turn_gae", 1.0], ["grpo", 1.0]]})


@pytest.mark.parametrize("exponent", [0, 120, 160, 250, 307])
def test_whitening_is_exact_at_any_scale(exponent):
    """Exact fractions: the mean, the unbiased variance and the epsilon; advantages near 1e160 used to square to inf and whiten to 0."""
    from fractions import Fraction

    from rllm_plugins.estimators.turn_gae import whiten_over_tokens

    rng = np.random.default_rng(exponent)
    advantages = rng.uniform(-1.5, 1.5, size=9) * 10.0**exponent
    weights = rng.integers(1, 6, size=9).astype(float)
    exact = [Fraction(a) for a in advantages]
    total = sum(Fraction(w) for w in weights)
    mean = sum(Fraction(w) * a for w, a in zip(weights, exact, strict=True)) / total
    var = sum(Fraction(w) * (a - mean) ** 2 for w, a in zip(weights, exact, strict=True)) / (total - 1)
    scale = max(abs(a) for a in exact)  # sqrt of the fraction, taken on a unit scale so that floats hold it
    root = math.sqrt((var + Fraction(1, 10**8)) / scale**2)
    want = [float((a - mean) / scale) / root for a in exact]
    np.testing.assert_allclose(whiten_over_tokens(advantages, weights), want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("seed", range(6))
def test_turn_gae_returns_equal_the_plain_loop_bit_for_bit_in_short_and_long_trajectories(seed):
    """Trajectories of 1 to 80 turns: both ways of the backward pass (per distance, and sorted by distance beyond 32 turns)."""
    from rllm_plugins.estimators.turn_gae import turn_gae_returns

    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 81, size=12)
    rewards, values = rng.normal(size=int(lengths.sum())), rng.normal(size=int(lengths.sum()))
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    want = []
    for i in range(lengths.size):
        want += plain_gae(rewards[offsets[i] : offsets[i + 1]].tolist(), values[offsets[i] : offsets[i + 1]].tolist(), 0.97, 0.9)
    assert turn_gae_returns(rewards, values, offsets, 0.97, 0.9).tolist() == want
