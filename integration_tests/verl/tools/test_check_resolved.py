"""``verl-check`` shows its work: what each option resolved to and from where, verl and its registration, the trainer path, the
agent loop; keys that a run would ignore, one option set twice, and values out of range are config errors."""

from __future__ import annotations

import inspect
from importlib.metadata import version
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytest.importorskip("hydra")

from rllm_verl.tools.check import verl_check

TURN_GAE = ["algorithm.adv_estimator=rllm_turn_gae", "critic.enable=true"]
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "verl_multi_turn"


def test_a_near_miss_of_rllm_estimator_kwargs_is_refused_with_the_closest_name():
    report = verl_check([*TURN_GAE, "+algorithm.rllm_estimator_kwarg.lam=0.9"])
    assert not report.ok
    assert report.errors == [
        "algorithm.rllm_estimator_kwarg={'lam': 0.9}: no key verl or rllm-plugins reads, so a run would ignore it. "
        "Did you mean algorithm.rllm_estimator_kwargs?"
    ]


def test_a_near_miss_deeper_under_algorithm_names_its_sibling_and_another_unknown_key_is_a_warning():
    report = verl_check(["algorithm.adv_estimator=rllm_grpo", "+algorithm.kl_ctrl.kl_coeff=0.1", "+algorithm.my_plugin_setting=3"])
    assert report.errors == [
        "algorithm.kl_ctrl.kl_coeff=0.1: no key verl or rllm-plugins reads, so a run would ignore it. Did you mean algorithm.kl_ctrl.kl_coef?"
    ]
    report = verl_check(["algorithm.adv_estimator=rllm_grpo", "+algorithm.my_plugin_setting=3"])
    assert report.ok, report
    assert report.warnings[0] == "algorithm.my_plugin_setting=3: no key verl or rllm-plugins reads (a run ignores it, unless a plugin of your own reads it)"


def test_a_near_miss_inside_rllm_estimator_kwargs_names_the_closest_option():
    report = verl_check([*TURN_GAE, "+algorithm.rllm_estimator_kwargs.lamb=0.9"])
    assert not report.ok and report.errors[0].endswith("Did you mean 'lam'?")


def test_one_option_from_two_places_with_different_values_is_refused_naming_both():
    report = verl_check([*TURN_GAE, "algorithm.lam=0.9", "+algorithm.rllm_estimator_kwargs.lam=0.95"])
    assert report.errors == [
        "lam is set twice with different values: algorithm.lam=0.9 and algorithm.rllm_estimator_kwargs.lam=0.95 "
        "(the estimator would take algorithm.rllm_estimator_kwargs.lam); set it in one place"
    ]
    same = verl_check([*TURN_GAE, "algorithm.gamma=0.9", "+algorithm.rllm_estimator_kwargs.gamma=0.9"])
    assert same.ok, same


def test_an_out_of_range_value_from_algorithm_is_a_config_error_naming_it_and_its_range():
    report = verl_check([*TURN_GAE, "algorithm.lam=1.5"])
    assert report.errors == [
        "algorithm.lam=1.5: estimator 'turn_gae': lam (GAE's lambda) must be a number in [0, 1], got float 1.5 "
        "(rllm_turn_gae reads lam from algorithm.lam when algorithm.rllm_estimator_kwargs.lam is not set)"
    ]
    assert report.trial_group_sizes == []  # refused before any toy batch


def test_the_resolved_table_gives_each_option_its_value_and_source():
    report = verl_check([*TURN_GAE, "+algorithm.rllm_estimator_kwargs.gamma=0.9", "trainer.use_v1=false"])
    assert report.ok, report
    import verl.experimental.agent_loop.single_turn_agent_loop as single_turn

    assert report.resolved == [
        ["gamma", "0.9", "algorithm.rllm_estimator_kwargs.gamma"],  # verl's default algorithm.gamma=1.0 is no conflict
        ["lam", "1.0", "algorithm.lam, verl's default"],
        ["whiten", "True", "the estimator's default"],
        [
            "verl",
            f"verl {version('verl')} loads the verl.plugins entry point 'rllm_plugins' (rllm_verl.plugin) in import verl: in place",
            "the installed distributions",
        ],
        ["trainer path", "legacy (RayPPOTrainer, compute_advantage)", "trainer.use_v1=false"],
        [
            "agent loop",
            f"'single_turn_agent': verl.experimental.agent_loop.single_turn_agent_loop.SingleTurnAgentLoop ({inspect.getsourcefile(single_turn)})",
            "actor_rollout_ref.rollout.agent.default_agent_loop, verl's own",
        ],
    ]
    printed = str(report).splitlines()
    at = printed.index("  resolved:")
    assert printed[at + 1 : at + 4] == [
        "    gamma         0.9  (from algorithm.rllm_estimator_kwargs.gamma)",
        "    lam           1.0  (from algorithm.lam, verl's default)",
        "    whiten        True  (from the estimator's default)",
    ]


def test_the_resolved_table_names_a_users_agent_loop_and_its_file(monkeypatch):
    monkeypatch.chdir(EXAMPLE)
    agent = "actor_rollout_ref.rollout.agent"
    report = verl_check(["algorithm.adv_estimator=rllm_gigpo", f"{agent}.agent_loop_config_path=agent_loops.yaml", f"{agent}.default_agent_loop=corridor"])
    assert report.ok, report
    rows = {row[0]: row for row in report.resolved}
    assert rows["agent loop"] == [
        "agent loop",
        f"'corridor': anchored_agent_loop.CorridorAgentLoop ({EXAMPLE / 'anchored_agent_loop.py'})",
        f"{agent}.default_agent_loop in agent_loops.yaml",
    ]
    assert rows["trainer path"] == ["trainer path", "v1 (PPOTrainer, compute_advantage_for_multi_trajectories)", "trainer.use_v1=true"]
    assert rows["gamma"] == ["gamma", "1.0", "algorithm.gamma, verl's default"]
