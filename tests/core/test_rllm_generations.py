"""rLLM's default configs of every generation load unchanged and run the collector for every estimator they list.

Fixtures (tests/core/rllm_configs/, each names its source): rLLM main (efbe422, the 9beb6e0 generation) and
main with ECHO (06bffb2), their ``algorithm`` and ``stepwise_advantage`` sections; the ``terminal-rl``
branch (a5fa9aa1) and ``feat/miles-backend`` (a12c050), rLLM's whole ``base.yaml`` copied verbatim.
"""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path

import pytest
from omegaconf import OmegaConf, open_dict

from rllm_plugins import AlgorithmConfig, RolloutCorrectionConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups

CONFIGS = Path(__file__).parent / "rllm_configs"
FIXTURES = sorted(p.name for p in CONFIGS.glob("*.yaml"))
VERBATIM = {"terminal_rl_a5fa9aa1.yaml": "terminal-rl-a5fa9aa1-base.yaml", "miles_backend_a12c050.yaml": "miles-backend-base.yaml"}
HEADER_LINES = 5  # the attribution header above a verbatim copy
SHARED = Path(__file__).resolve().parents[3] / "shared" / "rllm_configs"  # rLLM's files, where this checkout sits next to them
# Hydra overrides a user of feat/miles-backend might pass: every value changed from the default, so each is seen carried through
MILES_OVERRIDES = [
    "rllm.algorithm.adv_estimator=echo",
    "+rllm.algorithm.loss_params.env_loss_coef=0.1",
    "rllm.algorithm.loss_agg_mode=token-sum",
    "rllm.algorithm.lr_schedule=cosine",
    "rllm.algorithm.warmup_steps=10",
    "rllm.algorithm.eps_clip_high=0.28",
    "rllm.algorithm.rollout_correction.tis_mode=token",
]


def load(name: str, overrides: list[str] = ()):
    """A fixture as Hydra hands it over (struct: reading a missing key raises); a verbatim base.yaml is the ``rllm`` group.

    ``overrides`` in Hydra's syntax: ``key=value`` changes a key the config has, ``+key=value`` adds one.
    """
    config = OmegaConf.load(CONFIGS / name)
    if name in VERBATIM:
        config = OmegaConf.create({"rllm": config})
    OmegaConf.set_struct(config, True)
    for override in overrides:
        key, value = override.split("=", 1)
        parsed = OmegaConf.create(f"value: {value}").value
        if key.startswith("+"):
            with open_dict(config):
                OmegaConf.update(config, key[1:], parsed)
        else:  # struct: a key the config lacks raises
            OmegaConf.update(config, key, parsed)
    return config


def listed_estimators(name: str) -> list[str]:
    """The estimators a fixture lists: rLLM's comment on ``adv_estimator`` in a verbatim copy, else its ``listed_estimators``."""
    if name in VERBATIM:
        listed = re.search(r"^  adv_estimator: \w+ +# \[(.*?)\]", (CONFIGS / name).read_text(), re.M)
        return [estimator.strip() for estimator in listed.group(1).split(",")]
    return list(OmegaConf.load(CONFIGS / name).listed_estimators)


def test_the_four_fixtures_are_there():
    assert FIXTURES == ["main_echo_06bffb2.yaml", "main_efbe422.yaml", "miles_backend_a12c050.yaml", "terminal_rl_a5fa9aa1.yaml"]


@pytest.mark.skipif(not SHARED.is_dir(), reason="rLLM's base.yaml files are not next to this checkout")
@pytest.mark.parametrize("name", sorted(VERBATIM))
def test_the_branch_fixtures_are_rllms_files_verbatim(name):
    below_header = (CONFIGS / name).read_text().split("\n", HEADER_LINES)[HEADER_LINES]
    assert below_header == (SHARED / VERBATIM[name]).read_text()


@pytest.mark.skipif(not SHARED.is_dir(), reason="rLLM's base.yaml files are not next to this checkout")
def test_the_main_fixture_holds_the_sections_of_main_9beb6e0():
    real = OmegaConf.to_container(OmegaConf.load(SHARED / "main-9beb6e0-base.yaml"))
    fixture = OmegaConf.to_container(load("main_efbe422.yaml").rllm)
    assert (fixture["algorithm"], fixture["stepwise_advantage"]) == (real["algorithm"], real["stepwise_advantage"])
    listed = re.search(r"^  adv_estimator: \w+ +# \[(.*?)\]", (SHARED / "main-9beb6e0-base.yaml").read_text(), re.M).group(1)
    assert listed_estimators("main_efbe422.yaml") == [name.strip() for name in listed.split(",")]


def test_the_two_branches_share_the_algorithm_and_stepwise_nodes():
    terminal, miles = (OmegaConf.to_container(load(name).rllm) for name in sorted(VERBATIM))
    assert (terminal["algorithm"], terminal["stepwise_advantage"]) == (miles["algorithm"], miles["stepwise_advantage"])
    listed = ["grpo", "reinforce", "reinforce_plus_plus_baseline", "rloo", "echo"]
    assert listed_estimators("terminal_rl_a5fa9aa1.yaml") == listed_estimators("miles_backend_a12c050.yaml") == listed


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


@pytest.mark.parametrize("name", sorted(VERBATIM))
def test_the_branch_node_is_read_with_rllms_defaults(name):
    config = AlgorithmConfig.from_config(load(name).rllm.algorithm)
    assert (config.loss_params, config.loss_plugins, config.env_loss_coef) == ({}, [], 0.0)
    assert (config.loss_agg_mode, config.lr_schedule, config.warmup_steps, config.eps_clip, config.eps_clip_high) == ("token-mean", "constant", -1, 0.2, None)
    assert config.rollout_correction == RolloutCorrectionConfig(tis_cap=2.0)


def test_miles_node_carries_every_overridden_value():
    config = AlgorithmConfig.from_config(load("miles_backend_a12c050.yaml", MILES_OVERRIDES).rllm.algorithm)
    assert config.estimator == "echo" and config.loss_params == {"env_loss_coef": 0.1}
    assert config.env_loss_coef == 0.1  # ECHO's coefficient read from loss_params (the branch's place for it)
    assert (config.loss_agg_mode, config.lr_schedule, config.warmup_steps, config.eps_clip_high) == ("token-sum", "cosine", 10, 0.28)
    assert config.rollout_correction == RolloutCorrectionConfig(tis_mode="token", tis_cap=2.0)


def test_the_same_fields_through_the_constructor():
    config = load("miles_backend_a12c050.yaml", MILES_OVERRIDES)
    node = OmegaConf.to_container(config.rllm.algorithm)
    rollout = node.pop("rollout_correction")
    estimator = node.pop("adv_estimator")
    built = AlgorithmConfig(estimator=estimator, rollout_correction=RolloutCorrectionConfig(**rollout), **node)
    assert built == AlgorithmConfig.from_config(config.rllm.algorithm)


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


CASES = [(name, estimator) for name in FIXTURES for estimator in listed_estimators(name)]


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
