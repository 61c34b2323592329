"""Every snippet of docs/verl.md runs, as far as a machine without a GPU can run it, and so does the multi-turn recipe's launch.

- a ``python -m verl.trainer.main_ppo ...`` launch: its overrides compose into verl's own config and pass
  ``rllm-plugins verl-check`` (name, options, a trial through the trainer's advantage path);
- an ``rllm-plugins verl-check ...`` command: exits 0; a quoted ``$ rllm-plugins verl-check`` session
  prints what the page shows (``...`` stands for the lines left out);
- ``pip install "./rllm-plugins[extra]"``: the extra exists;
- a Python block: runs, on the batch the text around it describes.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import tomllib
import torch

pytest.importorskip("verl")
from rllm_verl.tools.check import main, verl_check
from verl import DataProto

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "verl.md").read_text()
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```", PAGE, re.S | re.M)


def commands(block: str) -> list[list[str]]:
    """The commands of a shell block: continuation lines joined, comments dropped, split as a shell would."""
    joined = block.replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def launch_overrides(argv: list[str]) -> list[str]:
    return [a for a in argv[3:] if a != "..."]


SHELL = [argv for lang, block in BLOCKS if lang == "bash" for argv in commands(block)]


def test_the_page_has_the_snippets_this_test_knows_how_to_run():
    kinds = {lang for lang, _ in BLOCKS}
    assert kinds <= {"bash", "python", ""}, kinds
    # verl-rehearse's block is run, and its output compared, by integration_tests/verl/tools/test_rehearse.py
    known = (["rllm-plugins", "verl-check"], ["rllm-plugins", "verl-rehearse"], ["pip", "install"])
    assert all(argv[:3] == ["python", "-m", "verl.trainer.main_ppo"] or argv[:2] in known or argv[0] == "export" for argv in SHELL)


@pytest.mark.parametrize("argv", [a for a in SHELL if a[0] == "export"], ids=lambda a: a[1])
def test_every_export_on_the_page_registers_the_names_on_a_verl_without_entry_points(argv):
    from rllm_verl.tools.check import entry_point_policy_error

    name, _, value = argv[1].partition("=")
    assert entry_point_policy_error({}, entry_points=False) is not None  # without it, verl 0.7/0.8 would not register them
    assert entry_point_policy_error({name: value}, entry_points=False) is None


@pytest.mark.parametrize("argv", [a for a in SHELL if a[:3] == ["python", "-m", "verl.trainer.main_ppo"]], ids=lambda a: " ".join(a[3:6]))
def test_every_launch_on_the_page_passes_verl_check(argv):
    report = verl_check(launch_overrides(argv))
    assert report.ok, report


@pytest.mark.parametrize("argv", [a for a in SHELL if a[:2] == ["rllm-plugins", "verl-check"]], ids=lambda a: " ".join(a[2:4]))
def test_every_verl_check_command_on_the_page_exits_0(argv):
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(argv[2:]) == 0


def test_the_pip_install_lines_name_extras_that_exist():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    named = [re.search(r"\[(\w+)\]", a[2])[1] for a in SHELL if a[:2] == ["pip", "install"]]
    assert named and all(extra in extras for extra in named)


@pytest.mark.parametrize("session", [b for lang, b in BLOCKS if lang == "" and b.startswith("$ rllm-plugins verl-check")], ids=lambda b: b.split()[3])
def test_every_quoted_verl_check_session_prints_what_the_page_shows(session, capsys):
    command, *shown = session.rstrip("\n").splitlines()
    assert main(shlex.split(command)[3:]) == 0
    printed = capsys.readouterr().out.splitlines()
    at = 0
    for line in shown:
        if line.strip() == "...":
            continue
        assert line in printed[at:], f"{line!r} is not printed (in order); printed:\n" + "\n".join(printed)
        at = printed.index(line, at) + 1


def test_the_python_snippet_runs_on_an_rllm_style_batch():
    (code,) = [b for lang, b in BLOCKS if lang == "python"]
    rows = [
        ("t1", "solver", "t1-a", 0, 0.0),
        ("t1", "solver", "t1-a", 1, 1.0),
        ("t1", "solver", "t1-b", 0, 0.0),
        ("t2", "judge", "t2-a", 0, 1.0),
        ("t2", "judge", "t2-b", 0, 0.0),
    ]
    rewards = torch.zeros(len(rows), 3)
    rewards[:, -1] = torch.tensor([r[4] for r in rows])
    columns = list(zip(*rows, strict=True))
    batch = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": torch.ones(len(rows), 3, dtype=torch.int64)},
        non_tensors={
            "uid": np.array(columns[0], dtype=object),
            "group_roles": np.array(columns[1], dtype=object),
            "trajectory_ids": np.array(columns[2], dtype=object),
            "step_ids": np.array(columns[3], dtype=np.int64),
        },
    )
    exec(compile(code, "docs/verl.md", "exec"), {"batch": batch})
    advantages = batch.batch["advantages"][:, 0].tolist()
    # solvers: rloo of t1-a (1.0) and t1-b (0.0) -> +1, -1 on every step; judges: grpo of 1.0 and 0.0 -> +-1/(1/2 + 1e-6) * 1/2
    assert advantages == pytest.approx([1.0, 1.0, -1.0, 0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6)])


@pytest.mark.parametrize("use_v1", ["true", "false"])
def test_the_recipes_launch_passes_verl_check_on_both_trainers(use_v1, monkeypatch):
    monkeypatch.chdir(ROOT / "examples" / "verl_multi_turn")  # launch.sh runs from its folder: agent_loops.yaml is found there
    script = (ROOT / "examples" / "verl_multi_turn" / "launch.sh").read_text()
    (argv,) = [a for a in commands(script) if a[:3] == ["python", "-m", "verl.trainer.main_ppo"]]
    overrides = [a for a in launch_overrides(argv) if a != "$@"]
    assert "actor_rollout_ref.rollout.agent.default_agent_loop=corridor" in overrides
    report = verl_check([*overrides, f"trainer.use_v1={use_v1}"])
    assert report.ok, report
    assert not report.warnings, report.warnings  # multi-turn: no single-turn warning
    assert "gamma=0.95 (from algorithm.gamma)" in str(report)
