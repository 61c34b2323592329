"""``verl-check`` resolves the agent-loop configuration as verl's rollout workers would, and names each mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verl")

from rllm_verl.tools.check import verl_check

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "verl_multi_turn"
AGENT = "actor_rollout_ref.rollout.agent"
GIGPO = ["algorithm.adv_estimator=rllm_gigpo", "actor_rollout_ref.rollout.multi_turn.enable=true"]


@pytest.fixture
def in_the_example(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from the example's folder, as launch.sh does (verl resolves a relative agent_loop_config_path from there)."""
    monkeypatch.chdir(EXAMPLE)
    monkeypatch.syspath_prepend(str(EXAMPLE))
    return EXAMPLE


def loops_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "loops.yaml"
    path.write_text(text)
    return path


def test_the_examples_loop_resolves_from_its_folder(in_the_example):
    report = verl_check([*GIGPO, f"{AGENT}.agent_loop_config_path=agent_loops.yaml", f"{AGENT}.default_agent_loop=corridor"])
    assert report.ok and not report.warnings, report


def test_a_config_file_that_does_not_exist_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    report = verl_check([*GIGPO, f"{AGENT}.agent_loop_config_path=agent_loops.yaml", f"{AGENT}.default_agent_loop=corridor"])
    assert not report.ok
    assert report.errors == [
        f"{AGENT}.agent_loop_config_path='agent_loops.yaml': no such file in the current folder ({tmp_path}) or verl's install folders, "
        "where verl looks; run from the folder holding it or give an absolute path"
    ]


def test_an_absolute_path_that_does_not_exist_is_named(tmp_path):
    missing = tmp_path / "nowhere.yaml"
    report = verl_check([*GIGPO, f"{AGENT}.agent_loop_config_path={missing}", f"{AGENT}.default_agent_loop=corridor"])
    assert not report.ok and report.errors == [f"{AGENT}.agent_loop_config_path={str(missing)!r}: no such file"]


def test_a_default_loop_no_file_defines_is_named_with_the_closest(in_the_example):
    report = verl_check([*GIGPO, f"{AGENT}.agent_loop_config_path=agent_loops.yaml", f"{AGENT}.default_agent_loop=coridor"])
    assert not report.ok
    (error,) = report.errors
    assert error.startswith(f"{AGENT}.default_agent_loop='coridor' is no agent loop verl knows: 'agent_loops.yaml' defines 'corridor'; verl's own are ")
    assert "'single_turn_agent'" in error and "'tool_agent'" in error and error.endswith("Did you mean 'corridor'?")


def test_a_custom_loop_without_a_config_file_is_named():
    report = verl_check([*GIGPO, f"{AGENT}.default_agent_loop=corridor"])
    assert not report.ok and f"no {AGENT}.agent_loop_config_path is set" in report.errors[0]


def test_a_target_that_does_not_import_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    loops_file(tmp_path, "- name: corridor\n  _target_: anchored_agent_loops.CorridorAgentLoop\n")
    report = verl_check([*GIGPO, f"{AGENT}.agent_loop_config_path=loops.yaml", f"{AGENT}.default_agent_loop=corridor"])
    assert not report.ok
    assert report.errors == [
        "agent loop 'corridor' in 'loops.yaml': _target_ 'anchored_agent_loops.CorridorAgentLoop' does not import "
        "(ModuleNotFoundError: No module named 'anchored_agent_loops'); its module must be importable from the current folder or PYTHONPATH, on every node"
    ]


def test_a_target_in_the_current_folder_imports_as_verl_run_there_would(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_loop_module.py").write_text((EXAMPLE / "anchored_agent_loop.py").read_text().replace('@register("corridor")', ""))
    loops_file(tmp_path, "- name: mine\n  _target_: my_loop_module.CorridorAgentLoop\n")
    report = verl_check([*GIGPO, f"{AGENT}.agent_loop_config_path=loops.yaml", f"{AGENT}.default_agent_loop=mine"])
    assert report.ok, report


def test_a_target_that_is_no_agent_loop_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    loops_file(tmp_path, "- name: corridor\n  _target_: collections.OrderedDict\n")
    report = verl_check([*GIGPO, f"{AGENT}.agent_loop_config_path=loops.yaml", f"{AGENT}.default_agent_loop=corridor"])
    assert report.errors == ["agent loop 'corridor' in 'loops.yaml': _target_ 'collections.OrderedDict' is not a subclass of verl's AgentLoopBase"]


@pytest.mark.parametrize(
    "text, said",
    [
        ("name: corridor\n_target_: a.B\n", "verl expects a YAML list of agent loops ('- name: ...' with '_target_: module.Class'), got a DictConfig"),
        ("- name: corridor\n", "entry 0 needs 'name' and '_target_' (module.Class), got {'name': 'corridor'}"),
    ],
)
def test_a_file_verl_cannot_read_is_named(tmp_path, monkeypatch, text, said):
    monkeypatch.chdir(tmp_path)
    loops_file(tmp_path, text)
    report = verl_check([*GIGPO, f"{AGENT}.agent_loop_config_path=loops.yaml", f"{AGENT}.default_agent_loop=corridor"])
    assert report.errors == [f"{AGENT}.agent_loop_config_path='loops.yaml': {said}"]


def test_multi_turn_enable_with_the_single_turn_loop_warns_for_a_step_level_estimator():
    report = verl_check(GIGPO)  # multi_turn.enable=true, but verl's default loop makes one turn
    assert report.ok and len(report.warnings) == 1
    assert report.warnings[0].startswith(f"this config is single-turn ({AGENT}.default_agent_loop=single_turn_agent, multi_turn.enable=True)")


def test_tool_agent_without_tools_warns_for_a_step_level_estimator():
    report = verl_check([*GIGPO, f"{AGENT}.default_agent_loop=tool_agent"])
    assert report.ok and len(report.warnings) == 1 and "tool_agent without tools" in report.warnings[0]
    tools_one_turn = ["actor_rollout_ref.rollout.multi_turn.tool_config_path=t.yaml", "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=1"]
    one_turn = verl_check([*GIGPO, f"{AGENT}.default_agent_loop=tool_agent", *tools_one_turn])
    assert one_turn.warnings == ["actor_rollout_ref.rollout.multi_turn.max_assistant_turns=1: tool_agent stops after one model turn, so every row has one turn"]


def test_an_outcome_level_estimator_gets_no_turn_warning():
    assert verl_check(["algorithm.adv_estimator=rllm_grpo", f"{AGENT}.default_agent_loop=tool_agent"]).warnings == []
