"""rLLM's default configs of every generation load unchanged and run the collector for every estimator they list.

Fixtures (tests/core/rllm_configs/, each names its source): rLLM main (efbe422, the 9beb6e0 generation),
main with ECHO (06bffb2), the ``terminal-rl`` branch (a5fa9aa1) and ``feat/miles-backend``.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rllm_plugins import AlgorithmConfig, RolloutCorrectionConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups

CONFIGS = Path(__file__).parent / "rllm_configs"
FIXTURES = sorted(p.name for p in CONFIGS.glob("*.yaml"))


def load(name: str):
    config = OmegaConf.load(CONFIGS / name)
    OmegaConf.set_struct(config, True)  # as Hydra hands it over: reading a missing key raises
    return config


def test_the_four_fixtures_are_there():
    assert FIXTURES == ["main_echo_06bffb2.yaml", "main_efbe422.yaml", "miles_backend.yaml", "terminal_rl_a5fa9aa.yaml"]


@pytest.mark.parametrize("name", FIXTURES)
def test_the_algorithm_node_loads_without_a_warning(name):
    config = load(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from_node = AlgorithmConfig.from_config(config.rllm.algorithm, stepwise_advantage_mode=config.rllm.stepwise_advantage.mode)
    assert from_node.stepwise_advantage_mode == "broadcast" and from_node.trainer_fields == {}


@pytest.mark.parametrize("name", FIXTURES)
def test_the_whole_config_with_verls_adv_estimator_gives_the_same_config(name):
    config = load(name)
    node = AlgorithmConfig.from_config(config.rllm.algorithm, stepwise_advantage_mode="broadcast")
    whole = OmegaConf.create({"algorithm": {"adv_estimator": str(config.rllm.algorithm.adv_estimator)}, "rllm": OmegaConf.to_container(config.rllm)})
    assert AlgorithmConfig.from_config(whole) == node


def test_terminal_rl_node_keeps_loss_params_loss_plugins_and_icepop_keys():
    config = AlgorithmConfig.from_config(load("terminal_rl_a5fa9aa.yaml").rllm.algorithm)
    assert (config.loss_params, config.loss_plugins, config.env_loss_coef) == ({}, [], 0.0)
    assert config.rollout_correction == RolloutCorrectionConfig(tis_cap=2.0, extra={"icepop_mode": None, "icepop_alpha": None, "icepop_beta": 2.0})


def test_miles_node_carries_every_changed_value():
    config = AlgorithmConfig.from_config(load("miles_backend.yaml").rllm.algorithm)
    assert config.estimator == "echo" and config.loss_params == {"env_loss_coef": 0.1}
    assert config.env_loss_coef == 0.1  # ECHO's coefficient read from loss_params (terminal-rl's place for it)
    assert (config.loss_agg_mode, config.lr_schedule, config.warmup_steps, config.eps_clip_high) == ("token-sum", "cosine", 10, 0.28)
    assert config.rollout_correction.extra == {"icepop_mode": "token", "icepop_alpha": None, "icepop_beta": 2.0}


def test_the_same_fields_through_the_constructor():
    node = OmegaConf.to_container(load("miles_backend.yaml").rllm.algorithm)
    rollout = node.pop("rollout_correction")
    estimator = node.pop("adv_estimator")
    extra = {k: rollout.pop(k) for k in ("icepop_mode", "icepop_alpha", "icepop_beta")}
    built = AlgorithmConfig(estimator=estimator, rollout_correction=RolloutCorrectionConfig(**rollout, extra=extra), **node)
    assert built == AlgorithmConfig.from_config(load("miles_backend.yaml").rllm.algorithm)


# --- every estimator a fixture lists, through the collector, against a plain computation ---

GROUPS = [[1.0, 0.0, 1.0, 0.5], [0.0, 1.0], [0.25]]
EPS = 1e-6


def _mean(xs):
    return sum(xs) / len(xs)


def _std(xs):
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


def expected(name: str) -> list[list[float]]:
    if name in ("grpo", "echo"):  # echo: GRPO's advantages (its loss term is the trainer's)
        return [[(r - (_mean(g) if len(g) > 1 else 0.0)) / ((_std(g) if len(g) > 1 else 1.0) + EPS) for r in g] for g in GROUPS]
    if name == "reinforce":
        return [list(g) for g in GROUPS]
    if name == "rloo":
        return [[len(g) / (len(g) - 1) * (r - _mean(g)) for r in g] if len(g) > 1 else list(g) for g in GROUPS]
    if name == "reinforce_plus_plus_baseline":
        centred = [[r - (_mean(g) if len(g) > 1 else 0.0) for r in g] for g in GROUPS]
        flat = [c for g in centred for c in g]
        return [[(c - _mean(flat)) / (_std(flat) + EPS) for c in g] for g in centred]
    if name == "prpo":
        flat = [r for g in GROUPS for r in g]
        return [[(r - _mean(flat)) / (_std(flat) + EPS) for r in g] for g in GROUPS]
    raise AssertionError(f"no plain computation for {name!r}")


def groups() -> list[TrajectoryGroup]:
    return [
        TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1, 2]), Step(response_ids=[3])], reward=r) for r in rewards], group_id=f"task{i}")
        for i, rewards in enumerate(GROUPS)
    ]


CASES = [(name, estimator) for name in FIXTURES for estimator in OmegaConf.load(CONFIGS / name).listed_estimators]


@pytest.mark.parametrize("name, estimator", CASES)
def test_every_listed_estimator_runs_through_the_collector(name, estimator):
    node = OmegaConf.to_container(load(name).rllm.algorithm)
    node["adv_estimator"] = estimator
    config = AlgorithmConfig.from_config(node, stepwise_advantage_mode="broadcast")
    batch = groups()
    metrics = collect_reward_and_advantage_from_trajectory_groups(batch, config)
    for group, want in zip(batch, expected(estimator), strict=True):
        for trajectory, value in zip(group.trajectories, want, strict=True):
            assert [step.advantage for step in trajectory.steps] == [pytest.approx(value, abs=1e-9)] * 2
    assert metrics["advantage/all_groups/mean"] == pytest.approx(_mean([a for g in expected(estimator) for a in g]), abs=1e-9)
