"""A step-level estimator published as an installed distribution: listed with its level, used by name in the collector and in verl."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups, get_estimator_spec
from rllm_plugins.testing import check_estimator


def test_the_installed_step_level_plugin_is_listed_as_step_level_and_keeps_the_contract(load_plugins):
    assert not [w for w in load_plugins() if "fixture_step" in w]
    spec = get_estimator_spec("last_turn_baseline")
    assert (spec.level, spec.needs_anchors) == ("step", False)
    assert check_estimator("last_turn_baseline").ok


def test_the_collector_gives_each_step_the_plugins_advantage(load_plugins):
    load_plugins()
    groups = [
        TrajectoryGroup([Trajectory(steps=[Step(), Step(), Step()], reward=3.0), Trajectory(steps=[Step()], reward=1.0)], group_id="t:agent"),
        TrajectoryGroup([Trajectory(steps=[Step(), Step()], reward=1.0), Trajectory(steps=[Step()], reward=1.0)], group_id="t:judge"),
    ]
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator_map={"agent": "last_turn_baseline"}))
    assert [[s.advantage for s in t.steps] for t in groups[0].trajectories] == [[0.0, 0.0, 1.0], [-1.0]]
    assert [[s.advantage for s in t.steps] for t in groups[1].trajectories] == [[0.0, 0.0], [0.0]]  # grpo, broadcast


def test_estimators_json_shows_the_plugins_level(cli_env):
    done = subprocess.run([sys.executable, "-m", "rllm_plugins", "estimators", "--json"], capture_output=True, text=True, env=cli_env, timeout=120, check=False)
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert (rows["last_turn_baseline"]["level"], rows["last_turn_baseline"]["plugin"]) == ("step", "fixture_step")


def test_verl_runs_the_plugin_as_rllm_last_turn_baseline_on_multi_turn_rows(cli_env):
    pytest.importorskip("verl")
    code = """
import json, numpy as np, torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage
mask = torch.tensor([[1, 1, 0, 1, 0], [1, 0, 0, 0, 0], [1, 0, 1, 0, 1]])
rewards = torch.zeros(3, 5); rewards[0, 3] = 3.0; rewards[1, 0] = 1.0; rewards[2, 4] = 2.0
data = DataProto.from_dict(tensors={"response_mask": mask, "token_level_rewards": rewards, "responses": torch.zeros(3, 5, dtype=torch.int64)},
                           non_tensors={"uid": np.array(["a", "a", "a"], dtype=object)})
out = compute_advantage(data, adv_estimator="rllm_last_turn_baseline", config=OmegaConf.create({"gamma": 1.0, "norm_adv_by_std_in_grpo": True}))
print(json.dumps(out.batch["advantages"].tolist()))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    # outcomes 3, 1, 2 (mean 2): only each row's last turn is credited
    assert json.loads(done.stdout.splitlines()[-1]) == [[0.0, 0.0, 0.0, 1.0, 0.0], [-1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0]]
