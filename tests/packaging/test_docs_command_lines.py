"""Every command line in a shell block of the README and docs/ names commands, flags and files that exist.

A line is a command of a ``bash``/``sh``/``shell`` block, or a ``$ `` line of a ``console`` block
(continuation lines joined, comments dropped, split as a shell would). By its first words:

- ``rllm-plugins estimators/plugins/check/--version ...``: runs (exit 0, 120 s at most); ``check`` of a
  placeholder name (``my_estimator``) is parsed only, any other name must be an estimator's;
- ``rllm-plugins CONTRIBUTED ...`` (``verl-check``): the command is contributed (an entry point), its flags
  are in its ``--help``, the rest are Hydra overrides ``key=value``;
- ``make TARGET [VAR=value]``: ``make -n TARGET`` (make's own parse of the Makefile, nothing run);
- ``python -m MODULE ...``: the module's file is found (nothing imported);
- ``python FILE --flag ...``: the file exists and every flag is an ``add_argument`` of it;
- ``pip install ...`` / ``pip wheel ...``: every path is a project with a ``pyproject.toml`` (and the extras
  it names), a wheel is named as ``pip wheel`` names this project's, and no project is asked for by name
  from the package index (none is on it); the installs of folders run as ``pip install --dry-run --no-index``.

Paths are read as the pages say: ``./rllm-plugins`` is a checkout of this repository, ``.`` and
``./rllm-median-baseline`` the plugin of docs/plugins.md (``examples/rllm-median-baseline``).
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import subprocess
import sys
from functools import cache
from importlib.util import find_spec
from pathlib import Path

import pytest
import tomllib

from rllm_plugins.cli import BUILTIN_COMMANDS, build_parser, contributed_commands
from rllm_plugins.registry import available_estimators
from rllm_plugins.shaping import available_shapers
from rllm_plugins.transforms import available_transforms

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*/README.md"))]
SCRIPT = Path(sys.executable).parent / "rllm-plugins"
SHELLS = ("bash", "sh", "shell")
PLACEHOLDERS = {"my_estimator"}  # names a page uses for the reader's own estimator
PLUGIN = ROOT / "examples" / "rllm-median-baseline"
LOCAL_PATHS = {"rllm-plugins": ROOT, "rllm-median-baseline": PLUGIN, ".": PLUGIN, "examples": ROOT / "examples"}


def shell_commands(text: str) -> list[list[str]]:
    """The commands of a page's shell blocks and the ``$`` lines of its console blocks."""
    commands = []
    for lang, block in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        if lang in SHELLS:
            lines = block.replace("\\\n", " ").splitlines()
        elif lang == "console":
            lines = [line[2:] for line in block.splitlines() if line.startswith("$ ")]
        else:
            continue
        commands += [shlex.split(line, comments=True) for line in lines if line.strip() and not line.lstrip().startswith("#")]
    return [argv for argv in map(without_assignments, commands) if argv]


ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def without_assignments(argv: list[str]) -> list[str]:
    """The command a shell runs after the environment assignments that lead its line (``NAME=value swift rlhf ...``); each
    assignment a page shows must name a variable the package reads (a test below)."""
    while argv and ASSIGNMENT.match(argv[0]):
        argv = argv[1:]
    return argv


COMMANDS = [(page.relative_to(ROOT).as_posix(), argv) for page in PAGES for argv in shell_commands(page.read_text())]


def ids(item: tuple[str, list[str]]) -> str:
    return f"{item[0]}: {' '.join(item[1])[:70]}"


def of(kind: str) -> list[tuple[str, list[str]]]:
    return [(page, argv) for page, argv in COMMANDS if argv[0] == kind]


def test_the_reader_finds_the_command_lines():
    text = (
        "```bash\nmake demo   # a comment\npython -m a.b x=1 \\\n  y=2\n```\n```console\n$ rllm-plugins plugins\nmedian  active\n```\n```python\nmake()\n```\n"
    )
    assert shell_commands(text) == [["make", "demo"], ["python", "-m", "a.b", "x=1", "y=2"], ["rllm-plugins", "plugins"]]
    assert {argv[0] for _, argv in COMMANDS} <= {"rllm-plugins", "make", "python", "pip", "export", "swift"}, "a command this test does not know how to check"
    assert without_assignments(["RLLM_SWIFT_ESTIMATOR=rloo", "swift", "rlhf"]) == ["swift", "rlhf"]


@pytest.mark.parametrize("item", of("swift"), ids=ids)
def test_every_swift_line_loads_the_shipped_plugin_file_and_names_only_variables_it_reads(item):
    """ms-swift's own command (not installed here): its ``--external_plugins`` is the file ``python -m rllm_swift.plugin``
    prints, and every leading assignment of that line names a variable the plugin file reads."""
    page, argv = item
    plugin = ROOT / "adapters" / "rllm_swift" / "plugin.py"
    assert plugin.is_file()
    assert argv[argv.index("--external_plugins") + 1] == "$(python -m rllm_swift.plugin)", page
    line = next(line for line in (ROOT / page).read_text().splitlines() if " ".join(argv[:2]) in line)
    named = re.findall(r"\b(RLLM_SWIFT_[A-Z_]+)=", line.split(" swift ", 1)[0])
    read = set(re.findall(r"\"(RLLM_SWIFT_[A-Z_]+)\"", plugin.read_text()))
    assert named and set(named) <= read, (named, read)
    assert len(of("rllm-plugins")) >= 5 and of("make") and of("python") and of("pip")


@pytest.mark.parametrize("item", of("export"), ids=ids)
def test_every_export_is_the_line_verl_check_names(item):
    """The one ``export`` the pages show is the line ``verl-check`` asks for on verl 0.7 and 0.8 (``rllm_verl.versions``)."""
    pytest.importorskip("verl")
    from rllm_verl.versions import MODULES_LINE

    assert " ".join(item[1]) == MODULES_LINE


# ---------------------------------------------------------------- rllm-plugins


def runs_as_is(argv: list[str]) -> bool:
    """A built-in command that is cheap to run here: anything but ``check`` of a placeholder name and ``new`` (which writes a
    project: tests/plugins/test_new_plugin_project.py runs the pages' ``new`` lines in a temporary folder)."""
    if argv[1:2] == ["new"]:
        return False
    if argv[1:2] == ["check"]:
        name = argv[2]
        if name in PLACEHOLDERS:
            return False
        known = {*available_estimators(), *available_transforms(), *available_shapers()}
        assert name in known, f"rllm-plugins check {name}: no estimator, transform or reward shaper has this name"
    return True


@pytest.mark.parametrize("item", [c for c in of("rllm-plugins") if c[1][1] in (*BUILTIN_COMMANDS, "--version")], ids=ids)
def test_every_built_in_rllm_plugins_command_parses_and_the_cheap_ones_exit_0(item):
    _, argv = item
    try:
        build_parser().parse_args(argv[1:])  # exits 2 (SystemExit) on an unknown command or flag
    except SystemExit as e:
        assert (e.code, argv[1:]) == (0, ["--version"]), f"rllm-plugins {' '.join(argv[1:])}: exit {e.code}"  # --version prints and exits 0
    if runs_as_is(argv):
        env = {k: v for k, v in os.environ.items() if not k.startswith("RLLM_PLUGINS")}
        done = subprocess.run([str(SCRIPT), *argv[1:]], capture_output=True, text=True, env=env, timeout=120, check=False)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@cache
def contributed_flags(name: str) -> dict[str, bool]:
    """The flags a contributed command's own ``--help`` lists, each with whether it takes a value (``--flag VALUE``)."""
    done = subprocess.run([str(SCRIPT), name, "--help"], capture_output=True, text=True, timeout=120, check=True)
    flags: dict[str, bool] = {}
    for flag, value in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)( [A-Z][A-Z_]*)?", done.stdout):
        flags[flag] = flags.get(flag, False) or bool(value)
    return flags


@pytest.mark.parametrize("item", [c for c in of("rllm-plugins") if c[1][1] not in (*BUILTIN_COMMANDS, "--version")], ids=ids)
def test_every_contributed_rllm_plugins_command_exists_with_its_flags(item):
    _, argv = item
    assert argv[1] in contributed_commands(), f"no installed distribution contributes the command {argv[1]!r}"
    flags = contributed_flags(argv[1])
    value_follows = False
    for arg in argv[2:]:
        if value_follows:  # the value of the flag before it
            value_follows = False
        elif arg.startswith("-"):
            assert arg.split("=")[0] in flags, f"rllm-plugins {argv[1]} has no flag {arg}"
            value_follows = flags[arg.split("=")[0]] and "=" not in arg
        else:
            assert re.fullmatch(r"[+~]{0,2}[\w.]+=\S*", arg), f"{arg!r} is neither a flag nor a Hydra override key=value"


# ---------------------------------------------------------------- make, python


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("item", of("make"), ids=ids)
def test_every_make_target_exists(item):
    _, argv = item
    done = subprocess.run(["make", "-n", *argv[1:]], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)
    assert done.returncode == 0, f"make -n {' '.join(argv[1:])}: {done.stderr}"


def module_file(dotted: str) -> Path | None:
    """The file of module ``dotted``, found without importing it (the top-level package is looked up, not imported)."""
    top, *rest = dotted.split(".")
    spec = find_spec(top)
    if spec is None:
        return None
    places = [Path(p) for p in spec.submodule_search_locations or []] if rest else [Path(spec.origin or "").parent]
    names = [Path(*rest).with_suffix(".py"), Path(*rest, "__main__.py"), Path(*rest, "__init__.py")] if rest else [Path(Path(spec.origin or "").name)]
    return next((place / name for place in places for name in names if (place / name).is_file()), None)


def script_flags(path: Path) -> set[str]:
    """Every option string of an ``add_argument`` call in ``path``."""
    flags = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            flags |= {a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("-")}
    return flags | {"-h", "--help"}


@pytest.mark.parametrize("item", of("python"), ids=ids)
def test_every_python_command_names_a_module_or_file_that_exists_and_flags_it_takes(item):
    _, argv = item
    if argv[1] == "-m":
        if argv[2].split(".")[0] == "verl" and find_spec("verl") is None:
            pytest.skip("verl is not installed")
        assert module_file(argv[2]) is not None, f"python -m {argv[2]}: no such module"
        return
    script = ROOT / argv[1]
    assert script.is_file(), f"python {argv[1]}: no such file"
    unknown = [a.split("=")[0] for a in argv[2:] if a.startswith("-") and a.split("=")[0] not in script_flags(script)]
    assert not unknown, f"python {argv[1]}: no flag {unknown}"


# ---------------------------------------------------------------- pip


@cache
def project(folder: Path) -> dict[str, object]:
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]


def local_project(arg: str) -> tuple[Path, list[str]]:
    """The folder a path argument names (``./rllm-plugins[verl]``) and its extras."""
    path, _, extras = arg.partition("[")
    first, *rest = Path(path).parts or (".",)
    assert first in LOCAL_PATHS, f"{arg}: a path this test cannot place; the pages name ./rllm-plugins, ./rllm-median-baseline, . and ./examples"
    folder = LOCAL_PATHS[first].joinpath(*rest)
    assert (folder / "pyproject.toml").is_file(), f"{arg}: {folder} is not a project (no pyproject.toml)"
    return folder, [e.strip() for e in extras.rstrip("]").split(",") if e.strip()]


def wheel_name(folder: Path) -> str:
    """The file ``pip wheel`` makes of the pure-Python project ``folder``."""
    version = project(folder).get("version") or __import__("rllm_plugins").__version__
    return f"{re.sub(r'[-_.]+', '_', str(project(folder)['name'])).lower()}-{version}-py3-none-any.whl"


LOCAL_NAMES = {re.sub(r"[-_.]+", "-", str(project(folder)["name"])).lower() for folder in (ROOT, PLUGIN)}


def checked_pip_arguments(argv: list[str]) -> list[str]:
    """The install targets of a pip line, each checked; the folders (without extras) returned for a dry run."""
    assert argv[1] in ("install", "wheel"), f"pip {argv[1]}: a pip command the pages do not use"
    folders, args = [], argv[2:]
    while args:
        arg = args.pop(0)
        if arg in ("-w", "--wheel-dir"):
            args.pop(0)
        elif arg.startswith("-"):
            assert arg in ("--no-deps", "-e", "--editable", "-U", "--upgrade"), f"pip option {arg} is not one this test knows"
        elif arg.split("[")[0].endswith(".whl"):
            name = Path(arg.split("[")[0]).name
            assert name == wheel_name(ROOT), f"{arg}: pip wheel names this project's wheel {wheel_name(ROOT)}"
            extras = re.findall(r"\[(.*)\]", arg)
            assert set(", ".join(extras).replace(" ", "").split(",")) - {""} <= set(project(ROOT).get("optional-dependencies", {})), arg
        elif arg.startswith((".", "/")):
            folder, extras = local_project(arg)
            unknown = set(extras) - set(project(folder).get("optional-dependencies", {}))
            assert not unknown, f"{arg}: {folder.name} has no extra {sorted(unknown)}"
            folders.append(arg.split("[")[0])
        else:
            name = re.split(r"[\[<>=!~ ;]", arg)[0].lower().replace("_", "-")
            assert name not in LOCAL_NAMES, f"pip {argv[1]} {arg}: {name} is not on the package index; install it from a checkout or a wheel"
    return folders


@pytest.mark.parametrize("item", of("pip"), ids=ids)
def test_every_pip_line_installs_paths_and_wheels_that_exist_and_nothing_the_index_lacks(item, tmp_path):
    _, argv = item
    folders = checked_pip_arguments(argv)
    if argv[1] != "install" or not folders:
        return
    where = tmp_path / "plugin"  # the plugin's folder, with a checkout of this repository and the examples next to it
    shutil.copytree(PLUGIN, where, ignore=shutil.ignore_patterns("*.egg-info", "build", "dist", "__pycache__"))
    for name in ("rllm-plugins", "rllm-median-baseline", "examples"):
        (where / name).symlink_to(ROOT if name == "rllm-plugins" else PLUGIN if name == "rllm-median-baseline" else ROOT / "examples")
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--no-build-isolation", "--quiet", *folders]
    done = subprocess.run(command, capture_output=True, text=True, cwd=where, timeout=300, check=False)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr[-2000:]}"


def test_the_checks_refuse_what_the_pages_must_not_say():
    with pytest.raises(AssertionError, match="rllm-plugins is not on the package index"):
        checked_pip_arguments(["pip", "install", ".", "rllm-plugins"])
    with pytest.raises(AssertionError, match="has no extra"):
        checked_pip_arguments(["pip", "install", "./rllm-plugins[vrl]"])
    with pytest.raises(AssertionError, match="pip wheel names this project's wheel"):
        checked_pip_arguments(["pip", "install", "dist/rllm_plugins-9.9.9-py3-none-any.whl"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["plugins", "--strikt"])
    assert module_file("rllm_plugins.cli") == ROOT / "rllm_plugins" / "cli.py" and module_file("rllm_plugins.nothing") is None
    assert "--steps" in script_flags(ROOT / "examples" / "trl_multi_turn" / "rollout_func.py")
