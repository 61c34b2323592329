"""``verl-rehearse`` never ends in a traceback: when verl does not import or an estimator raises, it prints what failed
and the fix, and exits 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

from rllm_verl.tools.rehearse import RehearsalError, rehearse
from rllm_verl.tools.verl_import import import_error_verdict, verl_import_error
from rllm_verl.versions import verl_features

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "verl_multi_turn"
VERSION = verl_features().version
COMMAND = [
    *("algorithm.adv_estimator=rllm_gigpo", "--agent-loop-config", "agent_loops.yaml", "--name", "corridor", "--prompt", "walk"),
]
CORRIDOR = ["actor_rollout_ref.rollout.agent.agent_loop_config_path=agent_loops.yaml", "actor_rollout_ref.rollout.agent.default_agent_loop=corridor"]
SHELL = "in the shell that starts the driver (and ray start, on a cluster you start yourself)"


def run_with(modules: str, *more: str) -> subprocess.CompletedProcess[str]:
    """``rllm-plugins verl-rehearse`` in a fresh interpreter (``import verl`` happens there) with ``VERL_USE_EXTERNAL_MODULES=modules``."""
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": modules}
    command = [sys.executable, "-m", "rllm_plugins", "verl-rehearse", *COMMAND, *more]
    return subprocess.run(command, cwd=EXAMPLE, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_a_space_in_verl_use_external_modules_gives_the_verdict_docs_verl_md_shows():
    done = run_with("json, rllm_verl.plugin")
    assert (done.returncode, done.stdout) == (1, "")
    shown = (ROOT / "docs" / "verl.md").read_text().split("instead of a traceback:\n\n```\n", 1)[1].split("```", 1)[0]
    assert done.stderr == shown.replace("verl 0.8.0", f"verl {VERSION}")
    assert done.stderr.splitlines()[-1] == f"rllm-plugins verl-rehearse: fix: export VERL_USE_EXTERNAL_MODULES=json,rllm_verl.plugin {SHELL}"


def test_a_misspelt_module_in_verl_use_external_modules_gives_the_verdict_and_the_exact_fix_also_with_json():
    done = run_with("rllm_verl.plugins")
    what = (
        f"import verl fails (ModuleNotFoundError: No module named 'rllm_verl.plugins'): verl {VERSION} imports each comma-separated name of "
        "VERL_USE_EXTERNAL_MODULES='rllm_verl.plugins' as is, and 'rllm_verl.plugins' is no module here (did you mean 'rllm_verl.plugin'?)"
    )
    fix = f"export VERL_USE_EXTERNAL_MODULES=rllm_verl.plugin {SHELL}"
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"rllm-plugins verl-rehearse: {what}.\nrllm-plugins verl-rehearse: fix: {fix}\n"
    as_json = run_with("rllm_verl.plugins", "--json")
    assert as_json.returncode == 1 and json.loads(as_json.stdout) == {"ok": False, "errors": [f"{what}. Fix: {fix}"], "warnings": []}


def test_verl_imports_here_so_there_is_no_verdict():
    assert verl_import_error() is None


def raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as caught:
        return caught


PYARROW_26 = ImportError("pyarrow requires NumPy 2.0 or newer, found 1.26.4")  # what pyarrow 26 raises under numpy 1
ONE = {"numpy": "1.26.4", "pyarrow": "26.0.1", "transformers": "4.57.6"}


@pytest.mark.parametrize(
    "version, fix",
    [
        ("0.8.0", "pip install 'numpy<2' 'transformers<5' 'pyarrow<26' (verl 0.8.0 runs with numpy 1 and transformers 4, and pyarrow 26 refuses numpy 1)"),
        ("0.7.1", "pip install 'numpy<2' 'transformers<5' 'pyarrow<26' (verl 0.7.1 runs with numpy 1 and transformers 4, and pyarrow 26 refuses numpy 1)"),
        ("0.9.1", "pip install 'numpy>=2' (pyarrow 26 refuses numpy 1), or pip install 'pyarrow<26' to keep numpy 1"),
    ],
)
def test_pyarrow_26_under_numpy_1_names_the_versions_and_the_pins(version, fix):
    verdict = import_error_verdict("verl.experimental.agent_loop.agent_loop", raised(PYARROW_26), {}, verl_version=version, installed=ONE)
    what = (
        "verl.experimental.agent_loop.agent_loop cannot be imported: ImportError: pyarrow requires NumPy 2.0 or newer, found 1.26.4 "
        f"(at {__file__}:{raised.__code__.co_firstlineno + 2}) (numpy 1.26.4, pyarrow 26.0.1, transformers 4.57.6 installed)"
    )
    assert verdict == f"{what}. Fix: {fix}"


def test_an_estimator_that_raises_is_named_with_the_fix(monkeypatch):
    from rllm_plugins import register_rllm_adv_estimator, unregister_rllm_adv_estimator

    @register_rllm_adv_estimator("rehearse_raises")
    def estimator(rewards, **_):
        raise RuntimeError("the plugin is broken")

    monkeypatch.chdir(EXAMPLE)
    try:
        with pytest.raises(RehearsalError) as caught:
            rehearse(["algorithm.adv_estimator=rllm_rehearse_raises", *CORRIDOR], ["walk"], ["+", "-"])
    finally:
        unregister_rllm_adv_estimator("rehearse_raises")
    line = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1) if 'raise RuntimeError("the plugin is broken")' in text)
    assert caught.value.errors == [
        f"algorithm.adv_estimator='rllm_rehearse_raises' raised RuntimeError: the plugin is broken (at {__file__}:{line}) on the rehearsed rows. "
        "Fix: rllm-plugins verl-check algorithm.adv_estimator=rllm_rehearse_raises names its provider and tries its options on toy groups"
    ]


def test_an_empty_name_in_the_module_list_gets_the_corrected_line_whatever_import_verl_raised():
    try:  # verl's own failure on "json,": importlib refuses the empty name
        import importlib

        importlib.import_module("")
    except ValueError as error:
        verdict = import_error_verdict("verl", error, {"VERL_USE_EXTERNAL_MODULES": "rllm_verl.plugin,"})
    assert verdict.startswith("import verl fails (ValueError: Empty module name): ")
    assert verdict.endswith(f"Fix: export VERL_USE_EXTERNAL_MODULES=rllm_verl.plugin {SHELL}")  # before: "one raised ..."
