"""An estimator with memory published as an installed distribution: it keeps the contract, and the collector and verl keep its state."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups, get_estimator_spec
from rllm_plugins.testing import check_estimator


def group(rewards, group_id="t:agent"):
    return TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1])], reward=r) for r in rewards], group_id=group_id)


def test_the_installed_stateful_plugin_is_stateful_and_keeps_the_contract(load_plugins):
    assert not [w for w in load_plugins() if "fixture_stateful" in w]
    assert get_estimator_spec("running_mean_baseline").stateful
    report = check_estimator("running_mean_baseline")
    assert report.ok, str(report)
    assert {"state_plain", "state_resumes", "state_input_untouched", "state_forms_agree"} <= set(report.verdicts)


def test_rllm_plugins_check_passes_for_it(cli_env):
    done = subprocess.run(
        [sys.executable, "-m", "rllm_plugins", "check", "running_mean_baseline", "--json"],
        capture_output=True,
        text=True,
        env=cli_env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rules = {row["rule"]: row["status"] for row in json.loads(done.stdout)["rules"]}
    assert rules["state_resumes"] == rules["state_deterministic"] == "pass"


def test_the_collector_continues_its_state_per_role(load_plugins):
    load_plugins()
    config = AlgorithmConfig(estimator="running_mean_baseline")
    first = [group([1.0, 3.0]), group([10.0], "t:judge")]
    collect_reward_and_advantage_from_trajectory_groups(first, config)
    second = [group([0.0]), group([10.0], "t:judge")]
    collect_reward_and_advantage_from_trajectory_groups(second, config)
    assert [t.steps[0].advantage for t in first[0].trajectories] == [1.0, 3.0]  # mean 0 at first
    assert second[0].trajectories[0].steps[0].advantage == -2.0  # agent's mean of 1 and 3
    assert second[1].trajectories[0].steps[0].advantage == 0.0  # judge's own mean
    assert config.state_dict()["estimators"]["running_mean_baseline"] == {"agent": {"count": 3, "mean": 4 / 3}, "judge": {"count": 2, "mean": 10.0}}


def test_verl_keeps_its_state_across_compute_advantage_calls(cli_env):
    pytest.importorskip("verl")
    code = """
import json, numpy as np, torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage
from rllm_verl.compute.state import verl_estimator_state
config = OmegaConf.create({"norm_adv_by_std_in_grpo": True})
out = []
for scores in ([1.0, 3.0], [0.0, 2.0]):
    rewards = torch.zeros(2, 3); rewards[:, 1] = torch.tensor(scores)
    tensors = {"response_mask": torch.ones(2, 3), "token_level_rewards": rewards}
    data = DataProto.from_dict(tensors=tensors, non_tensors={"uid": np.array(["a", "b"], dtype=object)})
    out.append(compute_advantage(data, adv_estimator="rllm_running_mean_baseline", config=config).batch["advantages"][:, 0].tolist())
print(json.dumps([out, verl_estimator_state().state_dict()]))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    advantages, state = json.loads(done.stdout.splitlines()[-1])
    assert advantages == [[1.0, 3.0], [-2.0, 0.0]]
    assert state["estimators"]["running_mean_baseline"] == {"all_groups": {"count": 4, "mean": 1.5}}
