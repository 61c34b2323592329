"""The ``rllm-plugins`` command: the real console script in a subprocess, and ``main()`` in process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import rllm_plugins
from rllm_plugins.cli import main, parse_args
from rllm_plugins.estimators import BUILTIN_SPECS

SCRIPT = Path(sys.executable).parent / "rllm-plugins"


def run(env: dict[str, str], *args: str, module: bool = False) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "rllm_plugins", *args] if module else [str(SCRIPT), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, check=False)


def test_plugins_json_reports_every_status(cli_env, plugin_site):
    done = run(cli_env, "plugins", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert {name: row["status"] for name, row in rows.items()} == {
        "builtin": "active",
        "fixture_broken": "error",
        "fixture_dup_a": "conflict",
        "fixture_dup_b": "conflict",
        "fixture_good": "active",
        "fixture_step": "active",
        "fixture_stateful": "active",
        "fixture_grpo_taker": "conflict",
        "fixture_legacy": "active",
        "fixture_raises": "active",
        "fixture_transform": "active",
        "median_baseline": "active",
    }
    assert rows["fixture_good"] == {
        "name": "fixture_good",
        "distribution": "rllm-fixture-good",
        "version": "1.2.0",
        "status": "active",
        "estimators": ["scaled_baseline"],
        "transforms": [],
        "shapers": [],
        "error": None,
    }
    assert rows["fixture_transform"]["transforms"] == ["recentre"] and rows["fixture_transform"]["estimators"] == []
    assert rows["fixture_transform"]["shapers"] == ["brevity"]
    assert rows["fixture_broken"]["error"] == (
        f"ModuleNotFoundError: No module named 'rllm_fixture_missing_dependency' (at {plugin_site}/rllm_fixture_broken/__init__.py:3)"
    )
    assert rows["fixture_dup_a"]["error"] == "'shared_baseline' is also offered by plugin 'fixture_dup_b' (distribution rllm-fixture-dup-b 2.0.0)"
    assert "skipping plugin 'fixture_broken' (distribution rllm-fixture-broken 0.3.0), which failed to load" in done.stderr


def test_plugins_json_shows_disabled_entry_points(cli_env):
    done = run({**cli_env, "RLLM_PLUGINS_DISABLE": "fixture_broken,fixture_dup_b"}, "plugins", "--json")
    statuses = {row["name"]: row["status"] for row in json.loads(done.stdout)}
    assert (statuses["fixture_broken"], statuses["fixture_dup_b"], statuses["fixture_dup_a"]) == ("disabled", "disabled", "active")
    assert "fixture_broken" not in done.stderr


def test_strict_mode_makes_the_command_fail_with_the_plugins_traceback(cli_env, plugin_site):
    done = run({**cli_env, "RLLM_PLUGINS_STRICT": "1"}, "plugins", "--json")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith("Traceback (most recent call last):\n")
    assert f'  File "{plugin_site}/rllm_fixture_broken/__init__.py", line 3, in <module>\n    import rllm_fixture_missing_dependency' in done.stderr
    assert done.stderr.endswith(
        "ModuleNotFoundError: No module named 'rllm_fixture_missing_dependency'\n"
        "rllm-plugins: plugin 'fixture_broken' (distribution rllm-fixture-broken 0.3.0) failed to load (RLLM_PLUGINS_STRICT is set): "
        f"ModuleNotFoundError: No module named 'rllm_fixture_missing_dependency' (at {plugin_site}/rllm_fixture_broken/__init__.py:3)\n"
    )


def test_estimators_json_lists_names_aliases_providers_and_conflicts(cli_env):
    done = run(cli_env, "estimators", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert rows["scaled_baseline"] == {
        "name": "scaled_baseline",
        "aliases": ["scaled"],
        "kind": "plugin",
        "provider": "plugin 'fixture_good' (distribution rllm-fixture-good 1.2.0)",
        "plugin": "fixture_good",
        "distribution": "rllm-fixture-good",
        "version": "1.2.0",
        "level": "outcome",
        "stateful": False,
        "description": "Twice the reward minus the group mean.",
    }
    assert (rows["rae"]["stateful"], rows["running_mean_baseline"]["stateful"], rows["shared_baseline"]["stateful"]) == (True, True, None)
    assert (rows["gigpo"]["level"], rows["step_reinforce"]["level"], rows["shared_baseline"]["level"]) == ("step", "step", None)
    assert rows["median_baseline"]["description"] == "r - group median (robust to outlier rewards)"
    assert rows["legacy_max_baseline"]["plugin"] == "fixture_legacy"
    assert (rows["grpo"]["kind"], rows["grpo"]["provider"]) == ("builtin", "rllm-plugins (built-in)")
    assert rows["shared_baseline"]["kind"] == "conflict"
    assert rows["shared_baseline"]["provider"] == (
        "plugin 'fixture_dup_a' (distribution rllm-fixture-dup-a 1.0.0); plugin 'fixture_dup_b' (distribution rllm-fixture-dup-b 2.0.0)"
    )
    assert "scaled" not in rows  # aliases are folded into their estimator's row
    plugin_names = [
        "always_fails",
        "last_turn_baseline",
        "legacy_max_baseline",
        "median_baseline",
        "running_mean_baseline",
        "scaled_baseline",
        "shared_baseline",
    ]
    assert list(rows) == sorted([spec.name for spec in BUILTIN_SPECS] + plugin_names)


def test_python_m_gives_the_console_script_output(cli_env):
    assert run(cli_env, "estimators", module=True).stdout == run(cli_env, "estimators").stdout


def test_listing_imports_no_framework_and_no_adapter(cli_env):
    code = (
        "import sys; from rllm_plugins.cli import build_parser, main; build_parser().format_help(); main(['estimators']); main(['plugins']); "
        "print(sorted({'verl', 'trl', 'torch', 'rllm_verl', 'rllm_trl'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env, timeout=120, check=False)
    assert done.stdout.splitlines()[-1] == "[]"


def test_estimators_table_shows_aliases_and_providers(load_plugins, capsys):
    load_plugins()
    assert main(["estimators"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["NAME", "(ALIASES)", "LEVEL", "PROVIDER"]
    assert "DESCRIPTION" in lines[0].split() or lines[1].split() == ["DESCRIPTION"]  # beside, or below when the terminal is narrow
    row = next(line for line in lines if line.startswith("scaled_baseline"))
    assert row.split("  ")[0] == "scaled_baseline (scaled)"
    assert next(line for line in lines if line.startswith("gigpo ")).split()[1] == "step"
    assert " rllm-fixture-good 1.2.0" in row  # the distribution providing it (the JSON names the plugin too)


def test_plugins_table_lists_errors_below(load_plugins, plugin_site, capsys):
    load_plugins()
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    error = f"ModuleNotFoundError: No module named 'rllm_fixture_missing_dependency' (at {plugin_site}/rllm_fixture_broken/__init__.py:3)"
    assert f"fixture_broken: {error}" in out.splitlines()
    good = next(line for line in out.splitlines() if line.startswith("fixture_good"))
    assert good.split() == ["fixture_good", "rllm-fixture-good", "1.2.0", "active", "scaled_baseline"]


def test_check_passes_a_well_behaved_plugin_estimator(load_plugins, capsys):
    load_plugins()
    assert main(["check", "scaled_baseline"]) == 0
    assert "scaled_baseline" in capsys.readouterr().out


def test_check_fails_an_estimator_that_raises_and_shows_why(load_plugins, capsys):
    load_plugins()
    assert main(["check", "always_fails"]) == 1
    assert "always_fails cannot score these rewards" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no_such_estimator", "rllm-plugins check: Unknown advantage estimator 'no_such_estimator'."),
        ("shared_baseline", "rllm-plugins check: estimator 'shared_baseline' is offered by 2 installed plugins:"),
    ],
)
def test_check_of_an_unusable_name_fails_with_the_lookup_error(load_plugins, capsys, name, message):
    load_plugins()
    assert main(["check", name]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(message)


@pytest.mark.parametrize("argv", [[], ["frobnicate"], ["check"], ["estimators", "--yaml"]])
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    assert "usage: rllm-plugins" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "passed"),
    [
        (["fixture-echo", "--help"], ["--help"]),
        (["fixture-echo", "--config-name", "x", "a=b", "--strict"], ["--config-name", "x", "a=b", "--strict"]),
        (["fixture-echo"], []),
    ],
)
def test_a_contributed_command_gets_every_argument_in_order(load_plugins, argv, passed):
    assert parse_args(argv).arguments == passed


def test_a_contributed_command_runs_with_its_arguments_and_exit_code(cli_env):
    done = run(cli_env, "fixture-echo", "--x", "a", "--help")
    assert (done.returncode, json.loads(done.stdout), done.stderr) == (3, ["--x", "a", "--help"], "")


def test_help_lists_contributed_commands_and_the_ignored_ones(cli_env):
    done = run({**cli_env, "COLUMNS": "1000"}, "--help")
    text = " ".join(done.stdout.split())  # argparse wraps lines
    assert (
        "fixture-echo Commands for the rllm-plugins command line: `fixture-echo` prints its arguments as JSON and exits 3. "
        "From rllm-fixture-command 0.5.0 (rllm_fixture_command:echo); 'rllm-plugins fixture-echo --help' for its arguments"
    ) in text
    assert "ignored: the command 'check' of rllm-fixture-command 0.5.0 (rllm_fixture_command:echo), a built-in command's name." in text


def test_a_contributed_command_cannot_replace_a_builtin_one(load_plugins, capsys):
    load_plugins()
    assert main(["check", "grpo"]) == 0
    assert capsys.readouterr().out.startswith("contract of estimator 'grpo'")


def test_a_command_that_cannot_be_loaded_says_from_where_and_why(cli_env):
    done = run(cli_env, "fixture-unloadable", "x")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "rllm-plugins fixture-unloadable: cannot load the command from rllm-fixture-command 0.5.0 (rllm_fixture_command.missing:main): "
        "ModuleNotFoundError: No module named 'rllm_fixture_command.missing'\n"
    )


def test_a_command_two_distributions_contribute_runs_neither_and_names_both(cli_env):
    done = run(cli_env, "fixture-dup")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "rllm-plugins fixture-dup: the command is contributed by 2 distributions: rllm-fixture-dup-a 1.0.0 (rllm_fixture_dup_a:command); "
        "rllm-fixture-dup-b 2.0.0 (rllm_fixture_dup_b:command). Uninstall all but one.\n"
    )


def installed(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def test_version_names_the_distribution_and_the_verl_and_trl_versions_found(cli_env):
    done = run(cli_env, "--version")
    expected = f"rllm-plugins {rllm_plugins.__version__} (verl {installed('verl')}, TRL {installed('trl')})\n"
    assert (done.returncode, done.stdout) == (0, expected)
    assert rllm_plugins.__version__ == metadata.version("rllm-plugins")


@pytest.fixture
def quiet_env(cli_env):
    """``cli_env`` without the fixture plugins that warn when they load (so that stderr is empty when all is well)."""
    return {**cli_env, "RLLM_PLUGINS_DISABLE": "fixture_broken,fixture_grpo_taker"}


@pytest.mark.parametrize("args", [("estimators", "--json"), ("plugins", "--json"), ("estimators",), ("check", "grpo")])
def test_output_into_a_closed_pipe_ends_quietly(quiet_env, args):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written (as `| head` after its lines), deterministically
    try:
        done = subprocess.run([str(SCRIPT), *args], stdout=write_end, stderr=subprocess.PIPE, text=True, env=quiet_env, timeout=120, check=False)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (141, "")
