"""The version matrix: each cell installs one supported combination in its own venv and runs the tests that concern it.

``make compat`` runs every cell (``nox``); ``nox -s "verl-0.8.0"`` one. Each cell writes its outcome (cell, versions
installed, result, seconds) into ``compat/last_run.json``; ``python compat/table.py`` renders the README's table of
tested versions from it. torch 2.13.0 (a CPU build on local disk) is installed first, with pip, in every venv where a
wheel exists (Python 3.11 here), so that no CUDA build is pulled; the Python 3.10 and 3.12 cells test the core alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.download_python = "never"
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).parent
LAST_RUN = ROOT / "compat" / "last_run.json"
TORCH = "torch==2.13.0"
PY311 = "3.11"
PY310 = os.environ.get("RLLM_COMPAT_PY310", "/root/.pyenv/versions/3.10.13/bin/python3.10")
PY312 = os.environ.get("RLLM_COMPAT_PY312", "/root/.pyenv/versions/3.12.1/bin/python3.12")
DEV = ["pytest>=8", "hypothesis>=6.100", "omegaconf>=2.3", "jmespath>=1.0", "setuptools>=77"]
# distributions whose installed versions a cell records
RECORDED = ("verl", "trl", "transformers", "numpy", "torch", "tensordict", "pyarrow", "ray", "TransferQueue", "ms-swift", "axolotl")

# The user's line on verl < 0.9 (no verl.plugins entry points there): rllm_verl.versions.MODULES_LINE.
OLD_VERL_ENV = {"VERL_USE_EXTERNAL_MODULES": "rllm_verl.plugin"}
# verl 0.7.1 and 0.8.0 (rLLM's pins): numpy 1, transformers 4, and pyarrow < 26 (pyarrow 26 refuses numpy 1)
OLD_VERL_PINS = ["numpy<2", "transformers<5", "pyarrow<26"]
# rLLM main's stack: verl 0.8.0 with transformers 5 (its pin: transformers>=5.5.3), numpy 1 as verl 0.8 forces it
RLLM_MAIN_PINS = ["numpy<2", "transformers>=5.5.3", "pyarrow<26"]

VERL_TESTS = [
    "integration_tests/verl/test_versions.py",  # every version guard
    "integration_tests/verl/test_rllm_user.py",  # rllm_grpo, rllm_gigpo by name, verl's own numbers
    "integration_tests/verl/test_registration.py",
    "integration_tests/verl/test_ray_actor.py",  # a Ray actor (where the TaskRunner computes) sees the names
    "integration_tests/verl/test_named_verl_parity.py",
    "integration_tests/verl/test_compute_advantage.py",
    "integration_tests/verl/compute/test_step_level.py",  # the step bridge
    "integration_tests/verl/compute/test_estimator_state.py",  # state save/resume with the trainers' checkpoints
    "integration_tests/verl/tools/test_rehearse.py",  # verl-rehearse: the examples' loops, the documented commands, the reply options
    "integration_tests/verl/tools/test_rehearse_loops.py",  # verl's own loops, sessions (v1), what a loop returns that verl refuses
    "integration_tests/verl/tools/test_rehearse_verdicts.py",  # a verdict and the fix, never a traceback
    "integration_tests/verl/tools/test_check_preflight.py",  # verl-check: transforms, module lists, the run's own rules
    "integration_tests/verl/compute/test_shaping.py",  # reward shapers with rllm_* and verl's own estimators, DAPO's reward manager
    "integration_tests/verl/tools/test_check_shapers.py",  # verl-check: reward shapers
]
VERL_V1_TESTS = ["integration_tests/verl/patches/test_sessions.py"]
TRL_TESTS = [
    "integration_tests/trl/test_versions.py",  # every version guard, a training step, the tool paths, state save/resume
    "integration_tests/trl/test_training.py",  # a real GRPOTrainer step with a tiny local model
    "integration_tests/trl/test_estimator_state.py",  # state save/resume
    "integration_tests/trl/test_config.py",  # RLLMGRPOConfig: every refusal and warning at config time
    "integration_tests/trl/test_shaping.py",  # reward shapers on the outcome and turn paths
]
# TRL 1.15.0's GRPOTrainer always scores with its fused LM head (trl.trainer.utils.add_fused_lm_head), which needs Triton:
# torch's CPU build has none, so no training step runs on CPU there; its cell checks the mixin against its signatures only
TRL_115_CPU_TESTS = [
    f"integration_tests/trl/test_versions.py::{name}"
    for name in (
        "test_a_changed_hook_is_refused_naming_the_feature_the_method_and_the_versions",
        "test_a_trl_without_the_reward_hook_is_refused_when_the_config_is_built",
        "test_the_releases_that_need_triton_for_every_log_probability_are_the_ones_whose_source_says_so",
        "test_a_trl_that_needs_triton_is_refused_at_config_time_on_a_cpu_naming_the_fix",
    )
]
CORE_TESTS = ["tests/core", "tests/steps"]
# axolotl 0.21 (Python >= 3.12; it pins trl 1.14.1 and transformers 5.20.1): the plugin, the trainers refused by name, a real GRPO
# step on CPU, docs/axolotl.md's YAML; torch 2.13.0 for Python 3.12 comes from the package index (the local CPU wheel is for 3.11)
AXOLOTL_TESTS = ["integration_tests/axolotl"]
# ms-swift 4.6 (its own GRPOTrainer; trl 0.29 and transformers 5.19 with it): the seam, its numbers against ms-swift's own, a
# real GRPO step on CPU and docs/swift.md's snippets. ms-swift 4.6 imports msgspec without declaring it (swift.rlhf_trainers.utils)
SWIFT_TESTS = ["integration_tests/swift"]
SWIFT_PINS = ["ms-swift==4.6.0", "msgspec>=0.18"]

# TRL 1.15 and 1.16 with the newest transformers (5.25.0) take a Triton-only log-prob path that torch's CPU build lacks
# (trl.trainer.utils: _ChunkedLogProbFunction is None); transformers 5.10.4, the one verl 0.9.1 allows, trains on CPU
CPU_TRANSFORMERS = ["transformers<5.11"]
EXAMPLE_PLUGIN = "./examples/rllm-median-baseline"  # an installed third-party plugin: rllm_median_baseline in verl's registry
# verl's next release before it ships (make compat-next): verl main, and verl main with verl PR #7237 merged (it moves
# compute_advantage, apply_kl_penalty and compute_response_mask into verl/trainer/ppo/trainer_utils.py, re-imported by
# ray_trainer), each exported at a fixed commit from a local git copy of github.com/verl-project/verl named by
# RLLM_COMPAT_VERL_GIT (a clone holding those commits: git fetch origin main pull/7237/merge); without it the cells skip
VERL_GIT = os.environ.get("RLLM_COMPAT_VERL_GIT", str(ROOT / ".nox" / "src" / "verl.git"))
SOURCES = ROOT / ".nox" / "src"
VERL_COMMITS = {  # folder under .nox/src -> (commit, the ref of github.com/verl-project/verl it was)
    "verl-main-1dda039b": ("1dda039b9c6311889a9c9a26040677e1254814f9", "main (2026-08-22, 0.10.0.dev)"),
    "verl-7237-dd65f001": ("dd65f001f846391b9f332d3e759dd47c5268b50c", "pull/7237/merge (#7237's head 741245d2 merged into main 1dda039b)"),
}
# the [verl] extra without its verl pin (it caps verl below 0.10): what the extra adds next to a verl built from source
VERL_EXTRA_UNCAPPED = ["cachetools>=5", "fastapi>=0.110", "uvicorn>=0.29", "starlette>=0.37", "pyzmq>=25", "msgspec>=0.18", "TransferQueue>=0.1.10"]
NEXT_TESTS = [
    "integration_tests/verl/test_next_release.py",  # where compute_advantage is defined, every module that imports it, #7473's arguments
    "integration_tests/verl/test_versions.py",
    "integration_tests/verl/test_rllm_user.py",
    "integration_tests/verl/test_registration.py",
    "integration_tests/verl/test_named_verl_parity.py",
    "integration_tests/verl/test_compute_advantage.py",
    "integration_tests/verl/compute/test_step_level.py",
    "integration_tests/verl/patches/test_reward_keys.py",
    "integration_tests/verl/tools/test_check_preflight.py",
    *VERL_V1_TESTS,
]
# cell -> (interpreter, requirements after torch, with torch, tests, environment)
CELLS: dict[str, tuple[str, list[str], bool, list[str], dict[str, str]]] = {
    "verl-0.7.1": (PY311, ["-e", ".[verl]", "verl==0.7.1", *OLD_VERL_PINS, EXAMPLE_PLUGIN], True, VERL_TESTS, OLD_VERL_ENV),
    "verl-0.8.0": (PY311, ["-e", ".[verl]", "verl==0.8.0", *OLD_VERL_PINS, EXAMPLE_PLUGIN], True, VERL_TESTS, OLD_VERL_ENV),
    "verl-0.8.0-transformers5": (PY311, ["-e", ".[verl]", "verl==0.8.0", *RLLM_MAIN_PINS, EXAMPLE_PLUGIN], True, VERL_TESTS, OLD_VERL_ENV),
    "verl-0.9.1": (PY311, ["-e", ".[verl]", "verl==0.9.1", EXAMPLE_PLUGIN], True, VERL_TESTS + VERL_V1_TESTS, {}),
    "trl-1.14.2": (PY311, ["-e", ".[trl]", "trl==1.14.2", "transformers<5", EXAMPLE_PLUGIN], True, TRL_TESTS, {}),
    "trl-1.15.0": (PY311, ["-e", ".[trl]", "trl==1.15.0", *CPU_TRANSFORMERS, EXAMPLE_PLUGIN], True, TRL_115_CPU_TESTS, {}),
    "trl-1.16.0": (PY311, ["-e", ".[trl]", "trl==1.16.0", *CPU_TRANSFORMERS, EXAMPLE_PLUGIN], True, TRL_TESTS, {}),
    "ms-swift-4.6": (PY311, ["-e", ".", *SWIFT_PINS, EXAMPLE_PLUGIN], True, SWIFT_TESTS, {}),
    "axolotl-0.21": (PY312, ["-e", ".", "axolotl==0.21.0"], True, AXOLOTL_TESTS, {}),
    "core-numpy1": (PY311, ["-e", ".", "numpy==1.26.4", EXAMPLE_PLUGIN], True, CORE_TESTS, {}),
    "core-numpy2": (PY311, ["-e", ".", "numpy>=2", EXAMPLE_PLUGIN], True, CORE_TESTS, {}),
    "core-py3.10": (PY310, ["-e", ".", EXAMPLE_PLUGIN], False, CORE_TESTS, {}),
    "core-py3.12": (PY312, ["-e", ".", EXAMPLE_PLUGIN], False, CORE_TESTS, {}),
    "next-verl-main": (PY311, ["-e", ".", *VERL_EXTRA_UNCAPPED, "./.nox/src/verl-main-1dda039b", EXAMPLE_PLUGIN], True, NEXT_TESTS, {}),
    "next-verl-7237": (PY311, ["-e", ".", *VERL_EXTRA_UNCAPPED, "./.nox/src/verl-7237-dd65f001", EXAMPLE_PLUGIN], True, NEXT_TESTS, {}),
}

USERS = {
    "verl-0.7.1": "rLLM before #671 (verl 0.7.1, transformers 4)",
    "verl-0.8.0": "verl 0.8.0 with transformers 4 (rLLM's transformers 4 install line)",
    "verl-0.8.0-transformers5": "rLLM main (since #671: verl 0.8.0, transformers 5)",
    "verl-0.9.1": "verl 0.9.1, the newest release",
    "trl-1.14.2": "TRL 1.14 (axolotl 0.21 pins trl 1.14.1)",
    "trl-1.15.0": "TRL 1.15",
    "trl-1.16.0": "TRL 1.16, the newest release",
    "ms-swift-4.6": "ms-swift 4.6 (its GRPOTrainer, trl 0.29, transformers 5.19)",
    "axolotl-0.21": "axolotl 0.21 (AxolotlGRPOTrainer through axolotl's plugins; trl 1.14.1, transformers 5.20.1)",
    "core-numpy1": "the core alone, numpy 1",
    "core-numpy2": "the core alone, numpy 2",
    "core-py3.10": "the core alone, the oldest Python",
    "core-py3.12": "the core alone, the newest Python",
    "next-verl-main": "verl's next release: verl main 1dda039b (0.10.0.dev)",
    "next-verl-7237": "verl's next release with verl #7237 (compute_advantage in trainer_utils)",
}
"""The downstream each cell stands for (a literal: ``compat/table.py`` shows it in the README's table)."""
CI_CELLS = ["verl-0.7.1", "verl-0.9.1", "trl-1.14.2", "trl-1.16.0", "core-py3.10", "core-py3.12"]
"""The oldest and the newest cell of each framework (and of the core's Python range): ``nox -t ci``, run by ``.ci/run``."""
NEXT_CELLS = ["next-verl-main", "next-verl-7237"]
"""verl's next release (``nox -t next``, ``make compat-next``); never in CI: their source is a local git copy of verl, not a package index."""


def _record(cell: str, result: str, seconds: float, test_seconds: float | None, versions: dict[str, str]) -> None:
    """Merge one cell's outcome into :data:`LAST_RUN` (other cells' entries are kept): ``seconds`` in all, ``test_seconds`` of pytest."""
    LAST_RUN.parent.mkdir(exist_ok=True)
    runs = json.loads(LAST_RUN.read_text()) if LAST_RUN.exists() else {}
    tests = None if test_seconds is None else round(test_seconds, 1)
    runs[cell] = {"result": result, "seconds": round(seconds, 1), "test_seconds": tests, "versions": versions, "python": versions.pop("python", "")}
    LAST_RUN.write_text(json.dumps(dict(sorted(runs.items())), indent=2) + "\n")


def _installed(session: nox.Session) -> dict[str, str]:
    code = (
        "import json, platform\nfrom importlib.metadata import version, PackageNotFoundError\nout = {'python': platform.python_version()}\n"
        f"for name in {RECORDED!r}:\n    try: out[name] = version(name)\n    except PackageNotFoundError: pass\nprint(json.dumps(out))"
    )
    text = session.run("python", "-c", code, silent=True) or "{}"
    return json.loads(str(text).strip().splitlines()[-1])


def _export_sources(session: nox.Session, requirements: list[str]) -> None:
    """Export each ``./.nox/src/<folder>`` of ``requirements`` from :data:`VERL_GIT` at its commit (:data:`VERL_COMMITS`), once;
    skip the cell, naming what to fetch, when that git copy lacks the commit."""
    for requirement in requirements:
        folder = Path(requirement).name
        if folder not in VERL_COMMITS or (SOURCES / folder / "setup.py").exists():
            continue
        commit, ref = VERL_COMMITS[folder]
        found = subprocess.run(["git", "--git-dir", VERL_GIT, "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True, check=False)
        if found.returncode != 0:
            session.skip(
                f"verl {commit[:8]} ({ref}) is not in {VERL_GIT}: set RLLM_COMPAT_VERL_GIT to a git copy of github.com/verl-project/verl "
                f"that holds it (git clone --bare https://github.com/verl-project/verl {VERL_GIT}; git --git-dir {VERL_GIT} fetch origin "
                f"{ref.split()[0]})"
            )
        partial = SOURCES / f"{folder}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        archive = subprocess.run(["git", "--git-dir", VERL_GIT, "archive", "--format=tar", commit], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(partial)], input=archive.stdout, check=True)
        partial.rename(SOURCES / folder)


def _run_cell(session: nox.Session, cell: str) -> None:
    _, requirements, with_torch, tests, env = CELLS[cell]
    _export_sources(session, requirements)  # before anything is recorded: a cell without its source is skipped, not failed
    start, versions, result, test_seconds = time.monotonic(), {}, "failed", None
    try:
        session.run("python", "-m", "pip", "install", "--quiet", "pip>=25.1")
        if with_torch:  # from local disk, before anything that depends on torch
            session.run("python", "-m", "pip", "install", "--quiet", TORCH)
        session.run("python", "-m", "pip", "install", "--quiet", *requirements, *DEV)
        versions = _installed(session)
        tests_start = time.monotonic()
        try:
            session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests, *session.posargs, env=env)
        finally:
            test_seconds = time.monotonic() - tests_start
        result = "passed"
    finally:
        _record(cell, result, time.monotonic() - start, test_seconds, versions)


def _make(cell: str) -> None:
    reuse = "yes" if os.environ.get("RLLM_COMPAT_REUSE") else "no"

    tags = ["ci"] if cell in CI_CELLS else ["next"] if cell in NEXT_CELLS else []

    @nox.session(name=cell, python=CELLS[cell][0], reuse_venv=reuse, tags=tags)
    def run(session: nox.Session) -> None:
        _run_cell(session, cell)

    run.__doc__ = f"{cell}: {' '.join(CELLS[cell][1][2:]) or 'the core'}"


for _cell in CELLS:
    _make(_cell)
nox.options.sessions = [cell for cell in CELLS if cell not in NEXT_CELLS]  # plain nox (make compat): every cell but the next release's
