"""``rllm-plugins check NAME --options JSON`` checks the options before any contract rule runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rllm_plugins.cli import main


@pytest.mark.parametrize(
    "name, options, expected",
    [
        ("gigpo", '{"gama": 0.9}', "unknown option 'gama' for estimator 'gigpo' (rllm-plugins (built-in)), which accepts: anchor_similarity, "),
        ("gigpo", '{"gama": 0.9}', "Did you mean 'gamma'?"),
        ("gigpo", '{"gamma": 1.5}', "gamma (the discount of step returns) must be a number in [0, 1], got float 1.5"),
        ("gigpo", '{"gamma": "0.9"}', "option 'gamma' of estimator 'gigpo' must be a number, got str '0.9'"),
        ("grpo", '{"epsilon": -1}', "option 'epsilon' of estimator 'grpo' must be a finite number >= 0, got -1"),
        ("rloo", '{"norm_adv_by_std_in_grpo": false}', "norm_adv_by_std_in_grpo is not an estimator option"),
        ("composite", '{"terms": [["grpo", 0.5], ["rlo", 0.5]]}', "Unknown advantage estimator 'rlo'. Did you mean 'rloo'?"),
    ],
)
def test_bad_options_are_refused_before_any_rule_runs(capsys, name, options, expected):
    code = main(["check", name, "--options", options])
    out, err = capsys.readouterr()
    assert code == 1
    assert out == ""  # no rule ran: no report
    assert err.startswith("rllm-plugins check --options: ") and expected in err and err.count("\n") == 1


def test_a_name_that_needs_options_without_them_gets_one_line_saying_what_to_pass(capsys):
    code = main(["check", "composite"])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert err == (
        "rllm-plugins check --options: estimator 'composite' needs options: terms must be a list of [name, weight] or "
        '[name, weight, {options}], e.g. [["grpo", 0.5], ["rloo", 0.5, {"epsilon": 1e-4}]]; got NoneType None\n'
    )


@pytest.mark.parametrize("name, options", [("gigpo", '{"gamma": 0.9}'), ("grpo", None), ("composite", '{"terms": [["grpo", 0.5], ["rloo", 0.5]]}')])
def test_good_options_and_none_where_none_are_needed_run_the_rules(capsys, name, options):
    code = main(["check", name, *(["--options", options] if options else [])])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert ": OK" in out.splitlines()[0]


def test_the_console_script_exits_1_on_a_misspelt_option():
    done = subprocess.run(
        [sys.executable, "-m", "rllm_plugins", "check", "gigpo", "--options", '{"gama": 0.9}'], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 1 and done.stdout == ""
    assert "unknown option 'gama'" in done.stderr and "Did you mean 'gamma'?" in done.stderr


def test_a_mistyped_transform_name_is_named_among_the_transforms(capsys):
    assert main(["check", "clipp"]) == 1
    _, err = capsys.readouterr()
    assert err.startswith("rllm-plugins check: Unknown advantage estimator 'clipp'.")
    assert err.endswith(" Among the advantage transforms: did you mean 'clip'?\n")  # before: no word of the transforms
    assert main(["check", "grpoo"]) == 1
    assert "Among the advantage transforms" not in capsys.readouterr().err


def test_a_transforms_refused_option_is_said_once_naming_the_command(capsys):
    assert main(["check", "clip", "--options", '{"min": "a"}']) == 1
    _, err = capsys.readouterr()
    assert err == (  # before: "rllm-plugins check: rllm-plugins check: ..."
        "rllm-plugins check: advantage transform 'clip' (rllm-plugins (built-in)) fails on a small input with the options {'min': 'a'}: "
        "clip: option 'min' must be a finite number or None, got 'a'\n"
    )
