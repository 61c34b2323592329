"""``RLLMGRPOConfig(reward_shapers=...)`` with TRL's real ``GRPOTrainer`` on a tiny local model.

The reference is the core estimator on the gathered rewards plus the terms written plainly here from the recorded
completion lengths; on the turn path, the core collector on the same completions as trajectories.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

G = 4
MAX, BUFFER, FACTOR = 8, 4, 0.5


def dapo_by_hand(lengths):
    return [min(0.0, FACTOR * ((MAX - BUFFER) - n) / BUFFER) for n in lengths]


def test_outcome_rewards_are_shaped_before_rloo_and_the_logged_rewards_stay_the_reward_functions(make_trainer, expected_advantages):
    shapers = [{"name": "dapo_overlong", "max_length": MAX, "buffer": BUFFER, "factor": FACTOR}]
    trainer = make_trainer(adv_estimator="rloo", reward_shapers=shapers, max_steps=1)
    trainer.train()
    record = next(r for r in trainer.records if r["mode"] == "train")
    per_func = record["rewards_per_func"].numpy().astype(np.float32)
    combined = (per_func * np.array([1.0, 0.5], dtype=np.float32)).sum(axis=1).astype(np.float64)
    terms = dapo_by_hand(record["lengths"])
    assert min(terms) < 0, "some completions reach the overlong buffer"
    shaped = torch.from_numpy((combined + np.array(terms))[:, None])
    want = expected_advantages(shaped, [1.0], G, "rloo")
    np.testing.assert_allclose(record["advantages"].numpy(), want, rtol=0, atol=1e-6)
    logged = trainer.state.log_history[0]
    assert logged["shaping/all_groups/dapo_overlong/min"] == pytest.approx(min(terms), abs=1e-6)
    assert logged["shaping/all_groups/shaped_reward/mean"] == pytest.approx(float(np.mean(combined + np.array(terms))), abs=1e-5)
    assert logged["reward"] == pytest.approx(float(combined.mean()), abs=1e-5)  # TRL's own log: the reward functions' sum
    assert "shapers dapo_overlong" in logged["rllm_provenance"]


def test_the_turn_path_shapes_each_completion_as_the_collector_does(make_trainer):
    from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups

    shapers = [{"name": "dapo_overlong", "max_length": MAX, "buffer": BUFFER, "factor": FACTOR}, {"name": "turn_penalty", "coef": 0.125}]
    trainer = make_trainer(adv_estimator="step_reinforce", reward_shapers=shapers, max_steps=1)
    trainer.train()
    record = next(r for r in trainer.records if r["mode"] == "train")
    combined = (record["rewards_per_func"].numpy().astype(np.float32) * np.array([1.0, 0.5], dtype=np.float32)).sum(axis=1).astype(np.float64)
    groups = [
        TrajectoryGroup(
            [Trajectory(steps=[Step(response_ids=[7] * record["lengths"][i], reward=0.0)], reward=float(combined[i])) for i in range(g, g + G)],
            group_id=f"q{g}",
        )
        for g in range(0, combined.size, G)
    ]
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="step_reinforce", reward_shapers=shapers))
    want = [t.steps[0].advantage for group in groups for t in group.trajectories]
    np.testing.assert_allclose(record["advantages"].numpy(), want, rtol=0, atol=1e-6)
    logged = trainer.state.log_history[0]
    assert logged["shaping/all_groups/turn_penalty/mean"] == pytest.approx(-0.125)  # one turn each: single-turn completions


def test_bad_shapers_fail_when_the_config_is_built(make_config, tmp_path):
    from rllm_trl import RLLMGRPOConfig

    with pytest.raises(
        ValueError, match=re.escape("RLLMGRPOConfig.reward_shapers[0]: reward shaper 'dapo_overlong' (rllm-plugins (built-in)) needs the option(s) ['buffer']")
    ):
        make_config(tmp_path, RLLMGRPOConfig, reward_shapers=[{"name": "dapo_overlong", "max_length": 8}])
    with pytest.raises(ValueError, match=r"Unknown reward shaper 'length_penalt'\. Did you mean 'length_penalty'\?"):
        make_config(tmp_path, RLLMGRPOConfig, reward_shapers='["length_penalt"]')
    with pytest.raises(ValueError, match=r"normalize_then_sum"):
        make_config(tmp_path, RLLMGRPOConfig, reward_shapers=["length_penalty"], multi_objective_aggregation="normalize_then_sum")


def test_the_object_path_with_the_configs_algorithm_config_shapes_as_the_trainers_path(make_config, tmp_path):
    from rllm_trl import RLLMGRPOConfig
    from rllm_trl.config import advantage_settings
    from rllm_trl.outcome import compute_advantages, compute_advantages_via_groups, prepare_batch

    from rllm_plugins.shaping.stage import Shapers

    config = make_config(tmp_path, RLLMGRPOConfig, adv_estimator="grpo", reward_shapers=[{"name": "linear_length_penalty", "max_length": 8, "coef": 0.5}])
    rng = np.random.default_rng(5)
    rewards = torch.from_numpy(rng.integers(0, 2, size=(4 * G, 1)).astype(np.float32))
    lengths = rng.integers(1, 9, size=4 * G)
    batch = prepare_batch(rewards, torch.tensor([1.0]), G)
    shapers = Shapers(advantage_settings(config).shapers, "RLLMGRPOConfig.reward_shapers", {"lengths": lengths.astype(np.float64)})
    fast = compute_advantages(batch, "grpo", shapers=shapers)
    slow, metrics = compute_advantages_via_groups(batch, [[1, 2]] * (4 * G), [[7] * n for n in lengths], config.algorithm_config())
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-6)
    assert metrics["shaping/all_groups/linear_length_penalty/min"] == pytest.approx(shapers.metrics["shaping/all_groups/linear_length_penalty/min"])
