"""``rllm-plugins new``: each variant's project installs, passes its own tests and ``rllm-plugins check``; what it refuses.

The projects are installed into one throwaway venv on top of this interpreter's packages (``--system-site-packages``
sees the base interpreter's only, so a ``.pth`` adds this environment's site-packages), offline:
``pip install --no-deps --no-build-isolation -e``. Their tests run with ``RLLM_PLUGINS_CHECK_PATHS=core``: the
frameworks' groups of paths import TRL and verl and start Ray (10 s to a minute per project);
``tests/plugins/test_check_paths.py`` runs a plugin through them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from rllm_plugins import cli
from rllm_plugins.scaffold import project_files

VARIANTS = {  # name: the arguments after it
    "tmpl_mean": [],
    "tmpl_running": ["--stateful"],
    "tmpl_steps": ["--level", "step"],
    "tmpl_recentre": ["--kind", "transform"],
}


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLLM_PLUGINS") and k != "PYTHONPATH"}
    done = subprocess.run(command, capture_output=True, text=True, env={**env, **kwargs.pop("env", {})}, timeout=300, check=False, **kwargs)
    assert done.returncode == 0, f"{' '.join(command)}: exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


def throwaway_venv(folder: Path) -> Path:
    """A venv whose interpreter sees this environment's packages after its own; returns its python."""
    pytest.importorskip("setuptools")  # the editable installs build without isolation
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(folder)
    python = folder / "bin" / "python"
    site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    Path(site, "_outer_env.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    return python


def test_every_variant_installs_passes_its_own_tests_and_the_check(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, arguments in VARIANTS.items():
        assert cli.main(["new", name, *arguments]) == 0
    projects = [tmp_path / f"rllm-{name.replace('_', '-')}" for name in VARIANTS]
    python = throwaway_venv(tmp_path / "venv")
    editable = [a for project in projects for a in ("-e", str(project))]
    run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", *editable])
    listed = run([str(python), "-m", "rllm_plugins", "plugins", "--strict"]).stdout
    for name, project in zip(VARIANTS, projects, strict=True):
        assert name in listed
        tests = run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=project, env={"RLLM_PLUGINS_CHECK_PATHS": "core"})
        last = tests.stdout.strip().splitlines()[-1]
        assert " passed" in last and "failed" not in last and "error" not in last, tests.stdout[-3000:]
        check = run([str(python), "-m", "rllm_plugins", "check", name], cwd=tmp_path)
        assert ": OK" in check.stdout.splitlines()[0], check.stdout


def test_the_projects_hold_the_entry_point_the_spec_and_the_three_config_lines():
    files = project_files("my_est")
    assert set(files) == {
        "pyproject.toml",
        "README.md",
        ".github/workflows/ci.yml",
        "rllm_my_est/__init__.py",
        "rllm_my_est/estimator.py",
        "rllm_my_est/plugin.py",
        "tests/test_my_est.py",
    }
    assert '[project.entry-points.rllm_plugins]\nmy_est = "rllm_my_est.plugin"' in files["pyproject.toml"]
    assert 'SPEC = AdvEstimatorSpec(name="my_est"' in files["rllm_my_est/estimator.py"]
    readme = files["README.md"]
    assert 'AlgorithmConfig(estimator="my_est")' in readme
    assert "algorithm.adv_estimator=rllm_my_est" in readme
    assert 'RLLMGRPOConfig(output_dir="out", adv_estimator="my_est")' in readme
    assert "@parametrize_with_checks([\"my_est\"])" in files["tests/test_my_est.py"]
    ci = files[".github/workflows/ci.yml"]
    assert 'python -m pip install ".[test]"' in ci and "python -m pytest" in ci
    transform = project_files("my_tf", kind="transform")
    assert 'AlgorithmConfig(estimator="grpo", advantage_transforms=["my_tf"])' in transform["README.md"]
    assert "'+algorithm.rllm_advantage_transforms=[my_tf]'" in transform["README.md"]
    assert 'RLLMGRPOConfig(output_dir="out", advantage_transforms=["my_tf"])' in transform["README.md"]
    assert 'SPEC = TransformSpec("my_tf", recentre' in transform["rllm_my_tf/transform.py"]
    assert "state_schema=" in project_files("my_run", stateful=True)["rllm_my_run/estimator.py"]
    assert 'level="step"' in project_files("my_step", level="step")["rllm_my_step/estimator.py"]


REFUSALS = [
    (["Bad-Name"], "invalid estimator name 'Bad-Name': names are lower case letters, digits and '_', starting with a letter"),
    (["9lives", "--kind", "transform"], "invalid transform name '9lives': names are lower case letters, digits and '_', starting with a letter"),
    (["MyEst"], "invalid estimator name 'MyEst': write it as the registry keeps it, 'myest'"),
    (["grpo"], "'grpo' is a built-in estimator of rllm-plugins, which a plugin cannot replace: choose another name"),
    (["clip", "--kind", "transform"], "'clip' is a built-in transform of rllm-plugins, which a plugin cannot replace: choose another name"),
    (["x", "--stateful", "--level", "step"], "--stateful is for outcome-level estimators: a stateful estimator cannot be step-level"),
    (["x", "--kind", "transform", "--stateful"], "--stateful is for estimators: an advantage transform keeps no state"),
    (
        ["x", "--kind", "transform", "--level", "step"],
        "--level is for estimators: a transform's level is declared in its TransformSpec (sequence, the template's)",
    ),
]


@pytest.mark.parametrize(("arguments", "message"), REFUSALS, ids=[" ".join(a) for a, _ in REFUSALS])
def test_a_refused_request_is_one_line_and_exit_2(arguments, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["new", *arguments]) == 2
    assert capsys.readouterr().err == f"rllm-plugins new: {message}\n"
    assert not list(tmp_path.iterdir())  # nothing written


def test_an_existing_non_empty_folder_is_refused_and_an_empty_one_taken(tmp_path, capsys):
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    assert cli.main(["new", "my_est", "--dir", str(full)]) == 2
    assert capsys.readouterr().err == f"rllm-plugins new: {full} already exists and is not an empty folder: choose another --dir\n"
    assert [p.name for p in full.iterdir()] == ["keep.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["new", "my_est", "--dir", str(empty)]) == 0
    assert (empty / "rllm_my_est" / "estimator.py").is_file()
    assert capsys.readouterr().out.splitlines()[0] == f"created {empty} (the outcome-level estimator my_est):"


def test_python_dash_m_rllm_plugins_new_writes_the_project(tmp_path):
    done = subprocess.run([sys.executable, "-m", "rllm_plugins", "new", "my_est", "--dir", str(tmp_path / "p")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "p" / "pyproject.toml").is_file()


DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_new_line_of_the_pages_writes_its_project(tmp_path, monkeypatch):
    from tests.packaging.test_docs_command_lines import COMMANDS

    lines = [argv for _, argv in COMMANDS if argv[:2] == ["rllm-plugins", "new"]]
    assert len(lines) >= 4
    monkeypatch.chdir(tmp_path)
    for argv in lines:
        assert cli.main(argv[1:]) == 0, argv
    assert (tmp_path / "rllm-my-estimator" / "rllm_my_estimator" / "estimator.py").is_file()
    assert (tmp_path / "runs" / "rllm_my_running" / "estimator.py").is_file()


def test_the_parametrize_snippet_of_the_plugins_page_runs_and_passes(tmp_path):
    import re

    text = (DOCS / "plugins.md").read_text()
    section = text.split("### Conformance checks in your tests", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    (tmp_path / "test_snippet.py").write_text(snippet)
    done = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_snippet.py"], cwd=tmp_path, env={"RLLM_PLUGINS_CHECK_PATHS": "core"})
    assert re.search(r"\d+ passed, \d+ skipped", done.stdout.splitlines()[-1]), done.stdout[-2000:]
