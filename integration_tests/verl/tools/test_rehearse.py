"""``rllm-plugins verl-rehearse``: the example's corridor agent loop on a CPU, its per-turn advantages against GiGPO's formulas."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

pytest.importorskip("verl")

from rllm_verl.tools.rehearse import main, rehearse
from rllm_verl.versions import verl_features

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "verl_multi_turn"
TOOL_EXAMPLE = EXAMPLE.parent / "verl_tool_agent"
DOCS = EXAMPLE.parents[1] / "docs" / "verl.md"
V1 = verl_features().v1_trainer  # from verl 0.9 on; before, the legacy trainer is the only one
V1_LINE = "through verl's compute_advantage_for_multi_trajectories (v1 trainer)"
LEGACY_LINE = "through verl's compute_advantage (legacy trainer)"
AGENT = "actor_rollout_ref.rollout.agent"
LAUNCH = ["algorithm.adv_estimator=rllm_gigpo", "algorithm.gamma=0.95", "actor_rollout_ref.rollout.n=4"]
CORRIDOR = [f"{AGENT}.agent_loop_config_path=agent_loops.yaml", f"{AGENT}.default_agent_loop=corridor"]
PROMPTS = ["walk the corridor", "go to the end"]
EPS = 1e-6


@pytest.fixture
def in_the_example(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(EXAMPLE)


def gigpo(rows, gamma: float, w: float = 1.0) -> list[list[float]]:
    """GiGPO per turn from the formulas: the score is the last turn's reward; episode GRPO plus w x the turn's
    discounted return normalised among the turns of its group with the same anchor state (population std)."""
    by_group = defaultdict(list)
    for i, row in enumerate(rows):
        by_group[row.group].append(i)
    out = {}
    for members in by_group.values():
        outcomes = [rows[i].reward for i in members]
        mean, sd = statistics.fmean(outcomes), statistics.pstdev(outcomes)
        returns, same_anchor = {}, defaultdict(list)
        for i in members:
            turns = rows[i].turns
            for t in range(turns):
                returns[(i, t)] = rows[i].reward * gamma ** (turns - 1 - t)
                same_anchor[rows[i].anchors[t]].append(returns[(i, t)])
        for i in members:
            values = []
            for t in range(rows[i].turns):
                peers = same_anchor[rows[i].anchors[t]]
                relative = 0.0 if len(peers) == 1 else (returns[(i, t)] - statistics.fmean(peers)) / (statistics.pstdev(peers) + EPS)
                values.append((rows[i].reward - mean) / (sd + EPS) + w * relative)
            out[i] = values
    return [out[i] for i in range(len(rows))]


def test_the_corridor_loops_per_turn_advantages_are_gigpos(in_the_example):
    rehearsal = rehearse([*LAUNCH, *CORRIDOR], PROMPTS, ["+", "-", "++"], seed=0)
    rows = rehearsal.rows
    assert (rehearsal.agent_loop, rehearsal.target, rehearsal.adv_estimator) == ("corridor", "anchored_agent_loop.CorridorAgentLoop", "rllm_gigpo")
    assert [row.group for row in rows] == [0] * 4 + [1] * 4
    assert all(row.anchors[0] == "cell 0" and len(row.anchors) == row.turns for row in rows)
    assert max(row.turns for row in rows) > 1 and len({row.reward for row in rows}) == 2, "the rehearsal must show turns and a success"
    for row, want in zip(rows, gigpo(rows, gamma=0.95), strict=True):
        assert row.advantages == pytest.approx(want, abs=1e-4)


def test_another_seed_draws_other_replies(in_the_example):
    first = rehearse([*LAUNCH, *CORRIDOR], PROMPTS, ["+", "-", "++"], seed=0)
    again = rehearse([*LAUNCH, *CORRIDOR], PROMPTS, ["+", "-", "++"], seed=0)
    other = rehearse([*LAUNCH, *CORRIDOR], PROMPTS, ["+", "-", "++"], seed=1)
    assert first.rows == again.rows and [r.anchors for r in first.rows] != [r.anchors for r in other.rows]


def on_this_verl(text: str) -> str:
    """What the command prints on the installed verl: a verl without the v1 trainer computes through the legacy one."""
    return text if V1 else text.replace(V1_LINE, LEGACY_LINE)


def test_the_command_prints_turns_replies_anchors_and_advantages(in_the_example, capsys):
    argv = [*LAUNCH, "--agent-loop-config", "agent_loops.yaml", "--name", "corridor", "--prompt", PROMPTS[0], "--replies", "+,-,++"]
    assert main(argv) == 0
    printed = capsys.readouterr().out.splitlines()
    rows = rehearse([*LAUNCH, *CORRIDOR], PROMPTS[:1], ["+", "-", "++"], seed=0).rows
    assert printed[0] == "agent loop 'corridor' (anchored_agent_loop.CorridorAgentLoop) against a scripted server (replies '+', '-', '++', seed 0)"
    assert printed[1] == on_this_verl(f"1 prompt(s) x 4 rollouts, 4 rows; rllm_gigpo {V1_LINE}")
    assert printed[2] == "reward: the agent loop's reward_score"
    drawn = [" ".join(map(repr, row.replies)) for row in rows]
    width = max(len(d) for d in drawn)
    assert printed[3] == f"row  group  rollout  output  reward  turns  {'replies':<{width}}  anchor state -> advantage, per turn"
    for i, (line, row) in enumerate(zip(printed[4:8], rows, strict=True)):
        assert len(row.replies) == row.turns and set(row.replies) <= {"+", "-", "++"}  # one drawn reply per model turn
        start = f"{i:>3}      0  {i:>7}       0  {row.reward:>6.3f}  {row.turns:>5}  {drawn[i]:<{width}}  "
        assert line == start + " | ".join(f"{a} -> {v:+.4f}" for a, v in zip(row.anchors, row.advantages, strict=True))
    assert printed[8] == f"turns per row: min {min(r.turns for r in rows)}, max {max(r.turns for r in rows)}"


def test_json_gives_each_row_the_replies_it_drew(in_the_example, capsys):
    argv = [*LAUNCH, "--agent-loop-config", "agent_loops.yaml", "--name", "corridor", "--prompt", PROMPTS[0], "--replies", "+,-,++", "--json"]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    rows = rehearse([*LAUNCH, *CORRIDOR], PROMPTS[:1], ["+", "-", "++"], seed=0).rows
    assert printed["replies"] == ["+", "-", "++"]
    assert [row["replies"] for row in printed["rows"]] == [row.replies for row in rows]
    assert all(len(row["replies"]) == len(row["advantages"]) for row in printed["rows"])


HERMES_CALL = '<tool_call>{"name": "calc", "arguments": {"a": 1, "b": 2}}</tool_call>'


def test_each_reply_option_gives_one_reply_and_a_reply_may_hold_commas(in_the_example, capsys):
    argv = [*LAUNCH, "--agent-loop-config", "agent_loops.yaml", "--name", "corridor", "--prompt", PROMPTS[0], "--json"]
    assert main([*argv, "--reply", HERMES_CALL, "--reply", "+"]) == 0
    assert json.loads(capsys.readouterr().out)["replies"] == [HERMES_CALL, "+"]


@pytest.mark.parametrize(
    "name, text",
    [("replies.txt", f"{HERMES_CALL}\n+\n\n-\n"), ("replies.json", json.dumps([HERMES_CALL, "+", "-"]))],
)
def test_a_replies_file_holds_one_reply_per_line_or_a_json_list(in_the_example, tmp_path, capsys, name, text):
    (tmp_path / name).write_text(text)
    argv = [*LAUNCH, "--agent-loop-config", "agent_loops.yaml", "--name", "corridor", "--prompt", PROMPTS[0], "--json"]
    assert main([*argv, "--replies-file", str(tmp_path / name)]) == 0
    assert json.loads(capsys.readouterr().out)["replies"] == [HERMES_CALL, "+", "-"]


@pytest.mark.parametrize(
    "options, given",
    [
        (["--replies", "+,-", "--replies", "++"], "--replies '+,-' and --replies '++'"),
        (["--replies", "+,-", "--reply", "++"], "--replies '+,-' and --reply '++'"),
        (["--reply", "++", "--replies-file", "r.txt"], "--reply '++' and --replies-file 'r.txt'"),
    ],
)
def test_replies_from_two_options_are_refused_naming_both(in_the_example, capsys, options, given):
    argv = [*LAUNCH, "--agent-loop-config", "agent_loops.yaml", "--name", "corridor", "--prompt", PROMPTS[0]]
    assert main([*argv, *options]) == 1
    assert capsys.readouterr().err == (
        f"rllm-plugins verl-rehearse: the scripted replies come from one option, and {given} were given: put every reply in one "
        "--replies (comma-separated), or give one --reply per reply (a reply may hold commas), or list them in one --replies-file\n"
    )


@pytest.mark.skipif(not V1, reason="the legacy trainer is the only one before verl 0.9")
def test_the_legacy_trainer_gives_the_corridor_the_same_advantages_as_v1(in_the_example):
    v1 = rehearse([*LAUNCH, *CORRIDOR], PROMPTS, ["+", "-", "++"], seed=0)
    legacy = rehearse([*LAUNCH, *CORRIDOR, "trainer.use_v1=false"], PROMPTS, ["+", "-", "++"], seed=0)
    assert (v1.trainer, legacy.trainer) == ("v1", "legacy")
    assert [r.anchors for r in legacy.rows] == [r.anchors for r in v1.rows]
    for old, new in zip(legacy.rows, v1.rows, strict=True):
        assert old.advantages == pytest.approx(new.advantages, abs=1e-6)


def test_a_mistake_in_the_agent_loop_config_is_named_and_exits_1(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main([*LAUNCH, "--agent-loop-config", "agent_loops.yaml", "--name", "corridor", "--prompt", "walk"]) == 1
    assert "agent_loop_config_path='agent_loops.yaml': no such file" in capsys.readouterr().err
    assert main([*LAUNCH, "--agent-loop-config", "agent_loops.yaml", "--name", "corridor", "--prompt", "walk", "--json"]) == 1
    printed = json.loads(capsys.readouterr().out)
    assert printed["ok"] is False and "agent_loop_config_path='agent_loops.yaml': no such file" in printed["errors"][0]


@pytest.mark.parametrize("prompts, replies, said", [([], ["+"], "at least one prompt"), (["walk"], [""], "the scripted model's replies")])
def test_no_prompt_or_no_reply_is_refused(in_the_example, prompts, replies, said):
    with pytest.raises(ValueError, match=said):
        rehearse([*LAUNCH, *CORRIDOR], prompts, replies)


def documented(heading: str) -> tuple[list[str], str]:
    """The command (its arguments after ``rllm-plugins verl-rehearse``) and the output docs/verl.md shows under ``heading``."""
    import re
    import shlex

    section = DOCS.read_text().split(heading, 1)[1].split("\n#", 1)[0]
    command, shown = re.findall(r"```bash\n(.*?)```\n\n```\n(.*?)```", section, re.S)[0]
    argv = shlex.split(command.replace("\\\n", " "))
    assert argv[:2] == ["rllm-plugins", "verl-rehearse"]
    return argv[2:], shown


def test_the_documented_command_prints_what_docs_verl_md_shows(in_the_example, capsys):
    argv, shown = documented("### Rehearse an agent loop on a CPU")
    assert main(argv) == 0
    assert capsys.readouterr().out == on_this_verl(shown)


def test_the_documented_tool_agent_command_calls_the_calculator_and_prints_what_docs_verl_md_shows(monkeypatch, capsys):
    monkeypatch.chdir(TOOL_EXAMPLE)
    argv, shown = documented("#### verl's `tool_agent` with a tool")
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert printed == on_this_verl(shown)
    rows = printed.splitlines()[4:-2]  # the rows, then "turns per row" and "advantages computed by"
    called = [row for row in rows if "</tool_call>" in row]
    assert called and all(repr("<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n") in row for row in called)  # the calculator's 2 + 3
    assert {row.split()[4] for row in rows} == {"0.000", "1.000"}


def test_the_command_is_contributed_to_rllm_plugins():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "rllm_plugins", "verl-rehearse", "--help"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage: rllm-plugins verl-rehearse" in done.stdout and "--agent-loop-config" in done.stdout
