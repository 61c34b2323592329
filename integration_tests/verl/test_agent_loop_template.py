"""The agent-loop template of examples/verl_agent_loop rehearses on both trainers as docs/agent_loops.md shows it."""

from __future__ import annotations

import random
import re
import shlex
import statistics
from pathlib import Path

import pytest

pytest.importorskip("verl")

from rllm_verl.tools.rehearse import main, rehearse

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "verl_agent_loop"
AGENT = "actor_rollout_ref.rollout.agent"
ANIMALS = ["cat", "dog", "bird"]


@pytest.fixture(autouse=True)
def in_the_example(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(EXAMPLE)


def games(seed: int, n: int) -> list[list[str]]:
    """Each rollout's guesses, drawn as the scripted server draws them: up to two, stopping at 'dog'."""
    draws, out = random.Random(seed), []
    for _ in range(n):
        guesses = [draws.choice(ANIMALS)]
        if guesses[0] != "dog":
            guesses.append(draws.choice(ANIMALS))
        out.append(guesses)
    return out


@pytest.mark.parametrize("use_v1", ["true", "false"])
def test_the_one_row_form_gives_every_turn_its_rollouts_grpo_advantage(use_v1):
    overrides = ["algorithm.adv_estimator=rllm_grpo", "actor_rollout_ref.rollout.n=6", f"trainer.use_v1={use_v1}"]
    overrides += [f"{AGENT}.agent_loop_config_path=agent_loops.yaml", f"{AGENT}.default_agent_loop=guess"]
    rehearsal = rehearse(overrides, ["guess the animal"], ANIMALS, seed=5, ground_truth="dog")
    played = games(5, 6)
    rewards = [float(g[-1] == "dog") for g in played]
    mean, sd = statistics.fmean(rewards), statistics.pstdev(rewards)
    assert len(set(rewards)) == 2, "the seed must give successes and failures"
    assert [row.reward for row in rehearsal.rows] == rewards
    assert [row.anchors for row in rehearsal.rows] == [[f"turn {t}" for t in range(len(g))] for g in played]
    for row, reward in zip(rehearsal.rows, rewards, strict=True):
        assert row.advantages == pytest.approx([(reward - mean) / (sd + 1e-6)] * row.turns, abs=1e-5)


def test_the_documented_command_prints_what_docs_agent_loops_md_shows(capsys):
    page = (ROOT / "docs" / "agent_loops.md").read_text()
    command, shown = re.findall(r"```bash\n(.*?)```\n\n```\n(.*?)```", page, re.S)[0]
    argv = shlex.split(command.replace("\\\n", " "))
    assert argv[:2] == ["rllm-plugins", "verl-rehearse"]
    assert main(argv[2:]) == 0
    assert capsys.readouterr().out == shown
