"""Make a release: ``make release VERSION=x.y.z`` (``python tools/release.py x.y.z``); ``--dry-run`` changes nothing.

In order, each step stopping the release with the fix when it fails:

1. CHANGELOG.md's newest section is ``## x.y.z`` (its heading may go on: ``## 0.2.0 (2027-01-15)``);
2. a copy of the tracked files, with ``__version__`` (``rllm_plugins/__init__.py``, the one place the version lives)
   set to x.y.z, is built into an sdist and a wheel (``python -m build --no-isolation``);
3. both are checked: ``twine check --strict``, and the metadata the package index shows (version, summary, the README
   as the long description, license, classifiers matching requires-python, keywords, project URLs, the framework
   extras as ranges), ``py.typed`` of each package in the wheel, and no tests, examples or caches in either;
4. the wheel is installed into a new virtual environment and run there (the smoke test): ``--smoke demo``, the
   default, installs it with its ``[all]`` extra (torch first, CPU build: the Makefile's TORCH_SPEC) and runs the
   first table of the demo (TRL training, two steps per estimator, then the verl table); ``--smoke core`` runs
   ``rllm-plugins --version``, ``rllm-plugins check grpo`` and one collector call. ``--deps local`` links the
   dependencies of the running Python into the new environment instead of installing them from the index;
5. without ``--dry-run``: ``__version__`` of the tree is set to x.y.z and the two files are copied into ``dist/``.

The upload is the maintainer's: ``python -m twine upload dist/rllm_plugins-x.y.z*`` (docs/development.md).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import zipfile
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERSION_FILE = Path("rllm_plugins") / "__init__.py"
VERSION_LINE = re.compile(r'^__version__ = "([^"]+)"', re.M)
PACKAGES = ("rllm_plugins", "rllm_verl", "rllm_trl")
OWN = ("rllm_plugins", "rllm_verl", "rllm_trl", "rllm_median_baseline", "__editable__", "_rllm")  # what --deps local leaves out
DEMO_TITLE = "== TRL: RLLMGRPOTrainer"  # the start of examples/demo/rllm_demo.py's TRL_TITLE
COLLECTOR_CALL = textwrap.dedent("""\
    import rllm_plugins
    from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups

    group = TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1, 2])], reward=r) for r in (1.0, 0.0)], group_id="q1:solver")
    collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(estimator="grpo"))
    print(rllm_plugins.__file__, rllm_plugins.__version__, [t.steps[0].advantage for t in group.trajectories])
""")


class ReleaseError(Exception):
    """A check that failed: the message says what and how to fix it."""


def say(message: str) -> None:
    print(f"release: {message}", flush=True)


def run(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: int = 1800) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise ReleaseError(f"{' '.join(argv)} failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-4000:]}")
    return done.stdout


# ---------------------------------------------------------------- 1. the changelog


def check_version(version: str) -> None:
    if not re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?(\.post\d+)?", version):
        raise ReleaseError(f"{version!r} is not a release version: x.y.z, e.g. 0.2.0 (or 0.2.0rc1)")


def check_changelog(version: str, changelog: Path) -> str:
    """The heading of the changelog's section for ``version``, which must be its newest."""
    headings = [line for line in changelog.read_text(encoding="utf-8").splitlines() if line.startswith("## ")]
    newest = headings[0] if headings else None
    if newest and newest.split()[1] == version:
        return newest
    if any(h.split()[1] == version for h in headings):
        raise ReleaseError(f"CHANGELOG.md's section for {version} is not its newest ({newest!r} is): a version is released once, newest first")
    above = f", above {newest!r}" if newest else ""
    raise ReleaseError(f"CHANGELOG.md has no section for {version}: add '## {version}' and what it changed at the top of its list{above}")


# ---------------------------------------------------------------- 2. the build


def tracked_copy(root: Path, tree: Path, version: str) -> None:
    """The files git tracks (as they are in the working tree), with ``__version__`` set to ``version``."""
    names = run(["git", "ls-files", "-z"], cwd=root).split("\0")
    for name in filter(None, names):
        source = root / name
        if source.is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)
    set_version(tree / VERSION_FILE, version)


def set_version(path: Path, version: str) -> None:
    text = path.read_text(encoding="utf-8")
    if not VERSION_LINE.search(text):
        raise ReleaseError(f'{path}: no line __version__ = "..." to set')
    path.write_text(VERSION_LINE.sub(f'__version__ = "{version}"', text, count=1), encoding="utf-8")


def build(tree: Path, out: Path) -> tuple[Path, Path]:
    try:
        import build as _  # noqa: F401
    except ImportError:
        raise ReleaseError("python -m build is not installed: pip install --group release (pyproject.toml's dependency group)") from None
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(tree)], timeout=900)
    wheels, sdists = sorted(out.glob("*.whl")), sorted(out.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise ReleaseError(f"the build made {[p.name for p in out.iterdir()]}, not one wheel and one sdist")
    return sdists[0], wheels[0]


# ---------------------------------------------------------------- 3. the checks


def wheel_metadata(wheel: Path) -> tuple[dict[str, list[str]], str, list[str]]:
    """The wheel's METADATA headers (each name's values), its long description, and the wheel's file names."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        message = Parser().parsestr(archive.read(meta).decode())
    headers: dict[str, list[str]] = {}
    for key, value in message.items():
        headers.setdefault(key, []).append(str(value))
    return headers, message.get_payload(), names


def metadata_problems(headers: dict[str, list[str]], description: str, version: str, readme: str) -> list[str]:
    """What the package index would show wrong or not at all (empty: ready)."""
    from packaging.specifiers import SpecifierSet

    def one(key: str) -> str:
        return (headers.get(key) or [""])[0]

    found = []
    if one("Name") != "rllm-plugins":
        found.append(f"Name is {one('Name')!r}, not 'rllm-plugins'")
    if one("Version") != version:
        found.append(f"Version is {one('Version')!r}, not {version!r}")
    for key in ("Summary", "License-Expression", "License-File", "Requires-Python", "Keywords"):
        if not one(key):
            found.append(f"no {key} (pyproject.toml [project])")
    if one("Description-Content-Type") != "text/markdown" or description.strip() != readme.strip():
        found.append("the long description is not README.md as markdown (readme = 'README.md')")
    urls = headers.get("Project-URL", [])
    if not urls or not all(re.fullmatch(r"[^,]+, https://\S+", u) for u in urls):
        found.append(f"project URLs missing or not https: {urls}")
    classifiers = headers.get("Classifier", [])
    if not classifiers:
        found.append("no classifiers")
    pythons = [c.rsplit(" :: ", 1)[1] for c in classifiers if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    allowed = SpecifierSet(one("Requires-Python"))
    wanted = [f"3.{minor}" for minor in range(8, 20) if f"3.{minor}" in allowed]
    if pythons != wanted:
        found.append(f"the Python classifiers {pythons} are not the versions requires-python allows {wanted}")
    extras = headers.get("Provides-Extra", [])
    for extra, framework in (("verl", "verl"), ("trl", "trl")):
        if extra not in extras:
            found.append(f"no extra [{extra}]")
        pins = [r for r in headers.get("Requires-Dist", []) if re.match(rf"{framework}[<>=! ]", r) and f'extra == "{extra}"' in r]
        if not pins or not all(">=" in p and "<" in p.replace("<=", "") for p in pins):
            found.append(f"the [{extra}] extra does not pin {framework} to a range (>=low,<high): {pins}")
    return found


def content_problems(wheel_names: list[str], sdist: Path) -> list[str]:
    found = []
    for package in PACKAGES:
        if f"{package}/py.typed" not in wheel_names:
            found.append(f"the wheel has no {package}/py.typed")
    with tarfile.open(sdist) as archive:
        sdist_names = ["/".join(n.split("/")[1:]) for n in archive.getnames()]
    for where, names in (("wheel", wheel_names), ("sdist", sdist_names)):
        shipped = [
            n
            for n in names
            if n.startswith(("tests/", "integration_tests/", "examples/", "benchmarks/", "tools/"))
            or "__pycache__" in n
            or n.endswith((".pyc", "conftest.py"))
            or re.search(r"(^|/)test_[^/]*\.py$", n)
        ]
        if shipped:
            found.append(f"the {where} ships test, example or cache files: {shipped[:5]}")
    return found


def check_distributions(sdist: Path, wheel: Path, version: str, readme: str) -> None:
    try:
        import twine  # noqa: F401
    except ImportError:
        raise ReleaseError("twine is not installed: pip install --group release (pyproject.toml's dependency group)") from None
    run([sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)], timeout=300)
    headers, description, names = wheel_metadata(wheel)
    found = metadata_problems(headers, description, version, readme) + content_problems(names, sdist)
    if found:
        raise ReleaseError("the distributions are not ready for the package index:\n  " + "\n  ".join(found))


# ---------------------------------------------------------------- 4. the clean install and the smoke test


def linked_dependencies(venv_python: Path, deps: Path) -> None:
    """``--deps local``: every distribution of the running Python but this project's, linked into the new environment."""
    deps.mkdir()
    site = Path(next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()))
    for entry in site.iterdir():
        if entry.name.startswith(OWN) or entry.suffix == ".pth":
            continue
        (deps / entry.name).symlink_to(entry)
    purelib = run([str(venv_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip()
    (Path(purelib) / "release_deps.pth").write_text(f"{deps}\n")


def install(wheel: Path, venv: Path, smoke: str, deps: str, torch_spec: str, framework_spec: str) -> Path:
    """A new virtual environment with the wheel (and its dependencies); returns its python."""
    python = venv / "bin" / "python"
    if deps == "local":
        run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=300)
        run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", "--no-index", str(wheel)], timeout=300)
        linked_dependencies(python, venv.parent / "deps")
        return python
    run([sys.executable, "-m", "venv", str(venv)], timeout=300)
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    if smoke == "demo":
        run([*pip, torch_spec])  # the CPU build first, as make install does, so no CUDA build is pulled
        run([*pip, f"{wheel}[all]", *framework_spec.split()])
    else:
        run([*pip, str(wheel)])
    return python


def smoke_test(python: Path, version: str, smoke: str, work: Path) -> str:
    """Run the installed wheel from outside the tree; returns the lines that show it ran."""
    env = {"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": os.environ.get("HOME", str(work))}
    script = python.parent / "rllm-plugins"
    shown = run([str(script), "--version"], cwd=work, env=env).strip()
    if not shown.startswith(f"rllm-plugins {version} "):
        raise ReleaseError(f"the installed wheel says {shown!r}, not version {version}")
    if smoke == "core":
        run([str(script), "check", "grpo"], cwd=work, env=env)
        where, _, advantages = run([str(python), "-c", COLLECTOR_CALL], cwd=work, env=env).strip().partition(" ")
        if not where.startswith(str(python.parent.parent)) or not advantages.startswith(version):
            raise ReleaseError(f"the collector call ran {where} {advantages}, not the wheel installed in {python.parent.parent}")
        return f"{shown}; rllm-plugins check grpo: OK; collector call: {advantages}"
    demo = ROOT / "examples" / "demo" / "rllm_demo.py"
    out = run(
        [str(python), str(demo), "--steps", "2", "--multi-turn-steps", "0", "--estimators", "grpo,rloo", "--output-dir", str(work / "demo")], cwd=work, env=env
    )
    lines = out.splitlines()
    if not any(line.startswith(DEMO_TITLE) for line in lines):
        raise ReleaseError(f"the demo printed no TRL table:\n{out[-3000:]}")
    start = next(i for i, line in enumerate(lines) if line.startswith(DEMO_TITLE))
    return f"{shown}; the demo's first table:\n" + "\n".join(lines[start : start + 6])


# ---------------------------------------------------------------- the command


def release(version: str, *, dry_run: bool, smoke: str, deps: str, torch_spec: str, framework_spec: str, root: Path = ROOT) -> int:
    check_version(version)
    if smoke == "demo" and deps == "local":  # datasets cannot fingerprint its pyarrow types through linked packages
        raise ReleaseError("--smoke demo needs its dependencies installed (--deps index); with --deps local use --smoke core")
    heading = check_changelog(version, root / "CHANGELOG.md")
    say(f"1/5 CHANGELOG.md: {heading}")
    with tempfile.TemporaryDirectory(prefix="rllm-release-") as scratch:
        work = Path(scratch)
        tracked_copy(root, work / "tree", version)
        sdist, wheel = build(work / "tree", work / "dist")
        say(f"2/5 built {sdist.name} and {wheel.name}")
        check_distributions(sdist, wheel, version, (root / "README.md").read_text(encoding="utf-8"))
        say("3/5 twine check --strict and the metadata, py.typed and contents checks: OK")
        python = install(wheel, work / "venv", smoke, deps, torch_spec, framework_spec)
        shown = smoke_test(python, version, smoke, work)
        say(f"4/5 smoke test ({smoke}, dependencies {'linked' if deps == 'local' else 'from the index'}) in a new venv: {shown}")
        if dry_run:
            say(f"5/5 dry run: the tree is unchanged (__version__ stays {current_version(root)}; nothing written to dist/)")
            return 0
        set_version(root / VERSION_FILE, version)
        (root / "dist").mkdir(exist_ok=True)
        for path in (sdist, wheel):
            shutil.copy2(path, root / "dist" / path.name)
    say(f"5/5 __version__ = {version!r} in {VERSION_FILE}; dist/{sdist.name} and dist/{wheel.name}")
    say(f"next: commit, tag v{version}, then python -m twine upload dist/rllm_plugins-{version}*")
    return 0


def current_version(root: Path = ROOT) -> str:
    match = VERSION_LINE.search((root / VERSION_FILE).read_text(encoding="utf-8"))
    return match.group(1) if match else "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/release.py", description="Check, build and smoke-test a release; set the version unless --dry-run.")
    parser.add_argument("version", help="the version to release, x.y.z; CHANGELOG.md's newest section must be '## x.y.z'")
    parser.add_argument("--dry-run", action="store_true", help="everything but setting the version and writing dist/: the tree stays as it is")
    parser.add_argument("--smoke", choices=("demo", "core"), default="demo", help="the smoke test: the demo's first table (default) or the core alone")
    parser.add_argument(
        "--deps", choices=("index", "local"), default="index", help="the new venv's dependencies: installed from the index (default) or linked from this Python"
    )
    parser.add_argument("--torch-spec", default="torch==2.13.0", help="with --deps index --smoke demo: the torch installed first (the Makefile's TORCH_SPEC)")
    parser.add_argument(
        "--framework-spec", default="verl==0.9.1 trl==1.16.0", help="with --smoke demo: the verl and TRL installed (the Makefile's FRAMEWORK_SPEC)"
    )
    args = parser.parse_args(argv)
    try:
        return release(args.version, dry_run=args.dry_run, smoke=args.smoke, deps=args.deps, torch_spec=args.torch_spec, framework_spec=args.framework_spec)
    except ReleaseError as e:
        print(f"release: refused: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
