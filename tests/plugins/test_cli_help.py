"""``rllm-plugins --help`` says what every command does, contributed ones included, in plain text and without importing them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(sys.executable).parent / "rllm-plugins"


def help_text(env: dict[str, str]) -> str:
    done = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, env={**env, "COLUMNS": "1000"}, timeout=120, check=True)
    return done.stdout


def test_a_contributed_command_is_described_by_the_first_sentence_of_its_module_docstring(cli_env):
    line = next(line for line in help_text(cli_env).splitlines() if "rllm_verl.tools.check:main" in line)
    assert "Fail fast: compose verl's Hydra `ppo_trainer` config and check `algorithm.adv_estimator` before launch." in line


def test_help_shows_no_restructuredtext_double_backticks(cli_env):
    assert "``" not in help_text(cli_env)


def test_help_reads_command_docstrings_without_importing_the_commands(cli_env):
    code = (
        "import sys\nfrom rllm_plugins.cli import build_parser\nbuild_parser().format_help()\n"
        "print(sorted(m for m in sys.modules if m.startswith(('rllm_verl', 'rllm_fixture', 'verl', 'torch'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env, timeout=120, check=True)
    assert done.stdout.splitlines()[-1] == "[]"
