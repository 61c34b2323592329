"""collect_reward_and_advantage_from_trajectory_groups: roles, broadcast, precomputed mode, metrics, errors."""

import logging

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups


def traj(reward, steps=2, tokens=3, advantage=None):
    return Trajectory(steps=[Step(response_ids=list(range(tokens)), advantage=advantage) for _ in range(steps)], reward=reward)


def group(rewards, group_id="task:all"):
    return TrajectoryGroup([traj(r) for r in rewards], group_id=group_id)


def step_advantages(g):
    return [[s.advantage for s in t.steps] for t in g.trajectories]


def test_every_step_of_a_trajectory_gets_the_trajectory_advantage():
    g = group([1.0, 0.0, 0.0, 1.0])
    collect_reward_and_advantage_from_trajectory_groups([g], AlgorithmConfig())
    a = 0.5 / (0.5 + 1e-6)
    assert step_advantages(g) == [[pytest.approx(x)] * 2 for x in (a, -a, -a, a)]
    assert all(type(s.advantage) is float for t in g.trajectories for s in t.steps)


def test_roles_use_their_estimator_from_the_map_in_one_call_each():
    solver1, solver2 = group([1.0, 0.0], "q1:solver"), group([1.0, 1.0, 0.0], "q2:solver")
    judge = group([1.0, 0.0, 0.0], "q1:judge")
    config = AlgorithmConfig(estimator="grpo", estimator_map={"solver": "rloo", "judge": "reinforce"})
    metrics = collect_reward_and_advantage_from_trajectory_groups([solver1, judge, solver2], config)
    assert step_advantages(solver1) == [[1.0] * 2, [-1.0] * 2]
    assert step_advantages(solver2) == [[pytest.approx(0.5)] * 2, [pytest.approx(0.5)] * 2, [pytest.approx(-1.0)] * 2]
    assert step_advantages(judge) == [[1.0] * 2, [0.0] * 2, [0.0] * 2]
    solver_advantages = np.array([1.0, -1.0, 0.5, 0.5, -1.0])
    assert metrics["advantage/solver/mean"] == pytest.approx(solver_advantages.mean())
    assert metrics["advantage/solver/std"] == pytest.approx(solver_advantages.std())
    assert metrics["advantage/judge/fraction_zero"] == pytest.approx(2 / 3)
    assert metrics["reward/judge/max"] == 1.0 and metrics["reward/solver/min"] == 0.0
    assert metrics["reward/solver/mean"] == pytest.approx(3 / 5)


def test_metric_keys_are_exactly_the_spec_ones_plus_rllm_mains_batch_diagnostics():
    metrics = collect_reward_and_advantage_from_trajectory_groups([group([1.0, 2.0], "t:r")], AlgorithmConfig())
    reward_keys = {f"reward/r/{k}" for k in ("mean", "std", "max", "min")}
    # rLLM main adds batch/{role}/... (rllm/trainer/algorithms/advantage.py, collect_reward_and_advantage_from_trajectory_groups)
    batch_keys = {f"batch/r/{k}" for k in ("total", "informative", "fractions/effective", "fractions/too_easy", "fractions/too_hard")}
    batch_keys |= {f"batch/r/group_reward_{s}/p{p}" for s in ("mean", "std") for p in (10, 50, 90)}
    assert set(metrics) == reward_keys | {f"advantage/r/{k}" for k in ("mean", "std", "max", "min", "fraction_zero")} | batch_keys
    assert all(type(v) is float for v in metrics.values())


def test_empty_input_gives_no_metrics_and_empty_groups_contribute_nothing():
    assert collect_reward_and_advantage_from_trajectory_groups([], AlgorithmConfig()) == {}
    assert collect_reward_and_advantage_from_trajectory_groups([TrajectoryGroup([], group_id="t:x")], AlgorithmConfig()) == {}


def test_collect_advantage_false_only_collects_rewards():
    g = group([3.0, 1.0])
    metrics = collect_reward_and_advantage_from_trajectory_groups([g], AlgorithmConfig(), collect_advantage=False)
    assert metrics == {"reward/all/mean": 2.0, "reward/all/std": 1.0, "reward/all/max": 3.0, "reward/all/min": 1.0}
    assert step_advantages(g) == [[None, None], [None, None]]


def test_precomputed_float_list_and_missing_advantages():
    g = TrajectoryGroup(
        [
            Trajectory(steps=[Step(response_ids=[1, 2, 3], advantage=0.5)], reward=None),
            Trajectory(steps=[Step(response_ids=[1, 2], advantage=[1.0, -1.0]), Step(response_ids=[7])], reward=None),
        ],
        group_id="t:distill",
    )
    metrics = collect_reward_and_advantage_from_trajectory_groups([g], AlgorithmConfig(use_precomputed_advantage=True))
    assert step_advantages(g) == [[[0.5, 0.5, 0.5]], [[1.0, -1.0], [0.0]]]
    tokens = np.array([0.5, 0.5, 0.5, 1.0, -1.0, 0.0])
    assert metrics["advantage/distill/mean"] == pytest.approx(tokens.mean())
    assert metrics["advantage/distill/fraction_zero"] == pytest.approx(1 / 6)
    assert not any(k.startswith("reward/") for k in metrics)


def test_precomputed_length_mismatch_warns_counts_and_defaults_to_zeros_as_rllm(caplog):
    """Both rLLM generations replace a list of the wrong length with zeros ("Defaulting to zeros"); before: kept as is."""
    step = Step(response_ids=[1, 2, 3], advantage=[1.0, 2.0])
    right = Step(response_ids=[1], advantage=[4.0])
    g = TrajectoryGroup([Trajectory(steps=[step, right], reward=1.0)], group_id="t:distill")
    with caplog.at_level(logging.WARNING):
        metrics = collect_reward_and_advantage_from_trajectory_groups([g], AlgorithmConfig(use_precomputed_advantage=True))
    assert "group 0 (group_id 't:distill'), trajectory 0, step 0: precomputed advantage has 2 values for 3 response tokens; defaulting to zeros" in caplog.text
    assert metrics["advantage/distill/precomputed_length_mismatches"] == 1.0
    assert (step.advantage, right.advantage) == ([0.0, 0.0, 0.0], [4.0])
    assert metrics["advantage/distill/mean"] == 1.0 and metrics["advantage/distill/fraction_zero"] == 0.75  # tokens 0, 0, 0, 4


def test_precomputed_advantages_are_overwritten_with_a_warning_when_not_enabled(caplog):
    g = TrajectoryGroup([traj(1.0, advantage=5.0), traj(0.0)], group_id="t:r")
    with caplog.at_level(logging.WARNING):
        collect_reward_and_advantage_from_trajectory_groups([g], AlgorithmConfig(estimator="rloo"))
    assert "use_precomputed_advantage is False; overwriting them with 'rloo'" in caplog.text
    assert step_advantages(g) == [[1.0, 1.0], [-1.0, -1.0]]


@pytest.mark.parametrize(
    "bad, message",
    [
        (None, "trajectory reward is None"),
        (float("nan"), "trajectory reward is nan"),
        (float("inf"), "trajectory reward is inf"),
        ("1.0", "trajectory reward must be a real number, got str '1.0'"),
        ([1.0], r"trajectory reward must be a real number, got list \[1.0\]"),
    ],
)
def test_bad_rewards_name_role_group_and_trajectory_and_change_nothing(bad, message):
    good = group([1.0, 0.0], "q1:solver")
    broken = TrajectoryGroup([traj(1.0), traj(bad)], group_id="q2:solver")
    with pytest.raises(ValueError, match=rf"role 'solver', group 1 \(group_id 'q2:solver'\), trajectory 1: {message}"):
        collect_reward_and_advantage_from_trajectory_groups([good, broken], AlgorithmConfig())
    assert step_advantages(good) == [[None, None], [None, None]]


def test_a_misbehaving_estimator_is_caught_before_anything_is_written():
    from rllm_plugins import register_rllm_adv_estimator, unregister_rllm_adv_estimator

    @register_rllm_adv_estimator("drops_one")
    def drops_one(rewards, **kwargs):
        advantages = [np.asarray(r)[:-1] for r in rewards]
        return advantages, advantages

    @register_rllm_adv_estimator("makes_nan")
    def makes_nan(rewards, **kwargs):
        advantages = [np.full(len(r), np.nan) for r in rewards]
        return advantages, advantages

    try:
        g = group([1.0, 0.0], "q:r")
        with pytest.raises(ValueError, match=r"estimator 'drops_one' .* group 0 \(group_id 'q:r'\) got 1 advantages for 2 trajectories"):
            collect_reward_and_advantage_from_trajectory_groups([g], AlgorithmConfig(estimator="drops_one"))
        with pytest.raises(ValueError, match=r"estimator 'makes_nan' .* trajectory 0 got advantage nan"):
            collect_reward_and_advantage_from_trajectory_groups([g], AlgorithmConfig(estimator="makes_nan"))
        assert step_advantages(g) == [[None, None], [None, None]]
    finally:
        unregister_rllm_adv_estimator("drops_one")
        unregister_rllm_adv_estimator("makes_nan")
