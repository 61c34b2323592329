"""The functional step (gathered rewards -> advantages) and the object path, without a trainer."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from rllm_trl import RLLMGRPOConfig, compute_advantages, compute_advantages_via_groups, compute_metrics, prepare_batch

from rllm_plugins import AlgorithmConfig

G = 8
ESTIMATORS = [
    *("grpo", "reinforce", "reinforce_plus_plus_baseline", "rloo", "prpo", "opo", "grpo_passk", "trl_grpo", "trl_grpo_batch", "median_baseline"),
    *("dr_grpo", "maxrl", "passk_training", "pkpo", "minus_length_weighted_mean", "gpg", "verl_grpo", "verl_rloo_vectorized"),
    "verl_reinforce_plus_plus_baseline",
]


def gathered(num_groups: int = 64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, 2) float32 rewards with NaNs: some single NaNs, some unscorable rows, one unscorable group; weights (2,)."""
    rng = np.random.default_rng(seed)
    rewards = rng.integers(0, 4, size=(num_groups * G, 2)).astype(np.float32)
    rewards[rng.random(rewards.shape) < 0.1] = np.nan
    rewards[rng.random(num_groups * G) < 0.1] = np.nan
    rewards[G : 2 * G] = np.nan
    return torch.from_numpy(rewards), torch.tensor([1.0, 0.25])


def combined_by_hand(rewards: torch.Tensor, weights: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    r = rewards.numpy()
    scorable = ~np.isnan(r).all(axis=1)
    return np.where(np.isnan(r), 0.0, r * weights.numpy()).sum(axis=1).astype(np.float32).astype(np.float64), scorable


def test_grpo_and_rloo_match_their_formulas_on_scorable_rows():
    rewards, weights = gathered()
    combined, scorable = combined_by_hand(rewards, weights)
    batch = prepare_batch(rewards, weights, G)
    grpo, rloo = compute_advantages(batch, "grpo"), compute_advantages(batch, "rloo")
    for g in range(combined.size // G):
        rows = np.arange(g * G, (g + 1) * G)
        keep, r = rows[scorable[rows]], combined[rows[scorable[rows]]]
        assert np.all(grpo[rows[~scorable[rows]]] == 0) and np.all(rloo[rows[~scorable[rows]]] == 0)
        if r.size > 1:
            np.testing.assert_allclose(grpo[keep], (r - r.mean()) / (r.std() + 1e-6), atol=1e-9)
            np.testing.assert_allclose(rloo[keep], r.size / (r.size - 1) * (r - r.mean()), atol=1e-9)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_object_path_agrees_with_fast_path(estimator):
    rewards, weights = gathered(seed=1)
    roles = [("solver", "judge")[(i // G) % 2] for i in range(rewards.shape[0])]
    lengths = torch.randint(1, 20, (rewards.shape[0],))
    completion_ids = [[7] * int(n) for n in lengths]
    prompt_ids = [[1, 2]] * rewards.shape[0]
    batch = prepare_batch(rewards, weights, G, roles=roles, lengths=lengths)
    estimator_map = {"judge": "rloo"}

    fast = compute_advantages(batch, estimator, estimator_map=estimator_map)
    slow, metrics = compute_advantages_via_groups(batch, prompt_ids, completion_ids, AlgorithmConfig(estimator=estimator, estimator_map=estimator_map))

    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-6)
    ours = compute_metrics(batch, fast)
    assert set(ours) == set(metrics)
    for key, value in metrics.items():
        assert ours[key] == pytest.approx(value, abs=1e-6), key


@pytest.mark.parametrize("scale_rewards", ["batch", "none"])
def test_the_config_algorithm_config_carries_scale_rewards_to_the_object_path(scale_rewards):
    rewards, weights = gathered(seed=2)
    batch = prepare_batch(rewards, weights, G)
    config = RLLMGRPOConfig(output_dir="unused", use_cpu=True, bf16=False, adv_estimator="trl_grpo", scale_rewards=scale_rewards)
    ids = [[1]] * rewards.shape[0]

    slow, _ = compute_advantages_via_groups(batch, ids, ids, config.algorithm_config())
    fast = compute_advantages(batch, "trl_grpo", trl_settings={"scale_rewards": scale_rewards})
    np.testing.assert_allclose(slow, fast, rtol=0, atol=1e-6)
    assert np.abs(fast - compute_advantages(batch, "trl_grpo")).max() > 0.01  # group scaling would differ


def test_each_role_uses_its_estimator():
    rewards, weights = gathered(num_groups=4, seed=2)
    roles = ["a"] * G + ["b"] * G + ["a"] * G + ["b"] * G
    batch = prepare_batch(rewards, weights, G, roles=roles)
    mixed = compute_advantages(batch, "grpo", estimator_map={"b": "reinforce"})
    combined, scorable = combined_by_hand(rewards, weights)
    b_rows = np.r_[G : 2 * G, 3 * G : 4 * G]
    np.testing.assert_allclose(mixed[b_rows], np.where(scorable[b_rows], combined[b_rows], 0.0))
    np.testing.assert_allclose(mixed[:G], compute_advantages(prepare_batch(rewards[:G], weights, G), "grpo"))
    assert {k.split("/")[1] for k in compute_metrics(batch, mixed)} == {"a", "b"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rewards_per_func": torch.zeros(10, 2)}, "do not split into groups of num_generations=8"),
        ({"reward_weights": torch.ones(3)}, "reward_weights has 3 entries for 2 reward functions"),
        ({"rewards_per_func": torch.zeros(16)}, "must have shape (N, num_reward_funcs)"),
        ({"num_generations": 0}, "num_generations must be a positive int"),
        ({"roles": ["x"] * 7 + ["y"] + ["x"] * 8}, "group 0 (rows 0..7) mixes roles ['x', 'y']"),
        ({"roles": ["x"] * 3}, "roles has 3 entries for 16 completions"),
        ({"lengths": [1, 2]}, "lengths has 2 entries for 16 completions"),
        ({"roles": ["x"] * 8 + [None] * 8}, "completion 8 (group 1): role is None; every prompt needs a role name (fill in the role column)"),
        ({"roles": ["x"] * 8 + [float("nan")] * 8}, "completion 8 (group 1): role is nan; every prompt needs a role name"),
        ({"roles": [""] * 16}, "completion 0 (group 0): role is the empty string; every prompt needs a role name"),
        (
            {"roles": ["x"] * 8 + ["math:judge"] * 8},
            "completion 8 (group 1): role 'math:judge' contains ':', which separates task and role in rLLM group ids ('<task>:<role>'), "
            "so it would be read as the role 'math'; rename the role without ':' (e.g. 'math_judge')",
        ),
        ({"rewards_per_func": torch.tensor([[float("inf"), 0.0]] + [[0.0, 0.0]] * 15)}, "completion 0 (group 0): combined reward is inf"),
    ],
)
def test_bad_input_names_what_and_where(kwargs, message):
    args = {"rewards_per_func": torch.zeros(16, 2), "reward_weights": torch.ones(2), "num_generations": G, **kwargs}
    with pytest.raises(ValueError) as error:
        prepare_batch(**args)
    assert message in str(error.value)


def test_roles_are_names_and_numbers_become_their_text():
    rewards = torch.tensor([[1.0], [0.0]] * 4)
    batch = prepare_batch(rewards, torch.ones(1), 2, roles=[0, 0, 1, 1, 0, 0, 1, 1])
    assert batch.roles == ("0", "1") and batch.group_roles.tolist() == [0, 1, 0, 1]


def test_trl_settings_reach_only_the_estimators_that_take_them():
    rewards = torch.tensor([[1.0], [0.0], [3.0], [5.0]])
    batch = prepare_batch(rewards, torch.ones(1), 2)
    flat = np.array([1.0, 0.0, 3.0, 5.0])
    centred = flat - np.repeat([0.5, 4.0], 2)
    batch_scaled = compute_advantages(batch, "trl_grpo", trl_settings={"scale_rewards": "batch"})
    np.testing.assert_allclose(batch_scaled, centred / (flat.std(ddof=1) + 1e-4), rtol=0, atol=1e-12)
    grpo = compute_advantages(batch, "grpo", trl_settings={"scale_rewards": "batch"})  # grpo ignores TRL's settings
    np.testing.assert_allclose(grpo, centred / (np.repeat([0.5, 1.0], 2) + 1e-6), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match=r"\['norm_adv_by_std_in_grpo'\] given both as estimator keyword arguments and as TRL settings"):
        compute_advantages(batch, "trl_grpo", trl_settings={"norm_adv_by_std_in_grpo": False})


def test_unknown_estimator_raises_the_registry_error():
    batch = prepare_batch(torch.zeros(8, 1), torch.ones(1), G)
    with pytest.raises(ValueError, match="Did you mean 'rloo'"):
        compute_advantages(batch, "rlooo")


def test_empty_batch_gives_no_advantages():
    assert compute_advantages(prepare_batch(torch.zeros(0, 1), torch.ones(1), 4)).shape == (0,)


def test_batch_diagnostics_count_the_scorable_rows_of_each_group():
    # rLLM main's batch/{role}/... (rllm/trainer/algorithms/advantage.py, collect_reward_and_advantage_from_trajectory_groups)
    rewards = torch.tensor([[1.0], [1.0], [1.0], [float("nan")], [0.0], [1.0], [0.0], [0.0], [float("nan")], [float("nan")], [float("nan")], [1.0]])
    batch = prepare_batch(rewards, torch.ones(1), 4, roles=["s"] * 8 + ["j"] * 4)
    metrics = compute_metrics(batch, compute_advantages(batch, "grpo"))
    # role s: group [1, 1, 1] (the NaN row left out) is too easy, [0, 1, 0, 0] informative; role j: one scorable row, no group of 2
    assert metrics["batch/s/total"] == 2 and metrics["batch/s/informative"] == 1 and metrics["batch/s/fractions/too_easy"] == 0.5
    assert metrics["batch/s/group_reward_mean/p50"] == pytest.approx((1.0 + 0.25) / 2)
    assert metrics["batch/s/group_reward_std/p90"] == pytest.approx(0.0 + 0.9 * np.std([0.0, 1.0, 0.0, 0.0]))
    assert not any(k.startswith("batch/j/") for k in metrics)


def test_the_object_path_refuses_a_per_role_loss():
    batch = prepare_batch(torch.zeros(8, 1), torch.ones(1), G)
    with pytest.raises(ValueError, match="are not applied with TRL"):
        compute_advantages_via_groups(batch, [[1]] * 8, [[2]] * 8, AlgorithmConfig(estimator_map={"judge": ("rloo", "ppo")}))


def test_the_object_path_refuses_normalize_then_sum_rather_than_summing_first():
    """The trajectories carry one combined reward: GDPO there would silently be sum-then-normalize numbers."""
    rewards, weights = gathered(seed=2)
    batch = prepare_batch(rewards, weights, G)
    config = RLLMGRPOConfig(output_dir="unused", use_cpu=True, bf16=False, adv_estimator="grpo", multi_objective_aggregation="normalize_then_sum")
    assert config.algorithm_config().multi_objective_aggregation == "normalize_then_sum"
    ids = [[1]] * rewards.shape[0]
    message = "compute_advantages_via_groups: multi_objective_aggregation='normalize_then_sum' needs each reward function's reward"
    with pytest.raises(ValueError, match=re.escape(message)):
        compute_advantages_via_groups(batch, ids, ids, config.algorithm_config())
    with pytest.raises(ValueError, match=re.escape(message)):
        compute_advantages_via_groups(batch, ids, ids, AlgorithmConfig(multi_objective_aggregation="normalize_then_sum"))
    gdpo = compute_advantages(batch, "grpo", aggregation="normalize_then_sum")
    assert np.abs(gdpo - compute_advantages(batch, "grpo")).max() > 0.01  # what the object path would have given instead


def test_the_object_path_of_an_estimator_that_overrides_scale_rewards_runs_like_the_fast_path():
    # rloo does not take scale_rewards: the fast path warns and runs rloo; the object path must too (was: unknown option 'scale_rewards')
    import warnings

    from rllm_trl import RLLMGRPOConfig

    from rllm_plugins import collect_reward_and_advantage_from_trajectory_groups
    from rllm_plugins.types import Step, Trajectory, TrajectoryGroup

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        config = RLLMGRPOConfig(output_dir="unused", use_cpu=True, bf16=False, adv_estimator="rloo", scale_rewards="batch").algorithm_config()
    assert config.estimator_kwargs == {}
    group = TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1])], reward=r) for r in (1.0, 0.0, 0.5)], group_id="q")
    collect_reward_and_advantage_from_trajectory_groups([group], config)
    by_hand = [1.0 - 0.25, 0.0 - 0.75, 0.5 - 0.5]  # leave-one-out: r_i - mean of the others
    assert [t.steps[0].advantage for t in group.trajectories] == pytest.approx(by_hand, abs=1e-12)
