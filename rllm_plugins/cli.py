"""The ``rllm-plugins`` command (also ``python -m rllm_plugins``).

``estimators [--json]``  every selectable estimator name, its level (outcome or step), provider and description;
``plugins [--json] [--strict]``  every plugin (built-ins and entry points) and its status; ``--strict``
                         exits 1 when one is in error, in conflict or misplaced (a CI check);
``check NAME [--json]``  the contract check of one estimator (:func:`rllm_plugins.testing.check_estimator`);
                         ``--paths``: its cells of the conformance matrix on every installed path (:mod:`rllm_plugins.testing.matrix`);
``new NAME [--kind] [--level] [--stateful] [--dir]``  writes a complete plugin project (:mod:`rllm_plugins.scaffold`);
``bench [--estimators] [--rows] [--tokens] [--device] [--json] ...``  times estimators on a batch of the shape asked for,
                         each checked against the collector first (:mod:`rllm_plugins.bench`);
``COMMAND ARGS...``      a command contributed by an installed distribution through the entry-point
                         group ``rllm_plugins.commands`` (the verl adapter contributes ``verl-check``).

A contributed command is an entry point ``name = "module:function"``; ``function(argv: list[str])``
gets every argument after the command name and returns the exit code. It is imported only when run.
Exit codes: 0 success, 1 failure (a check failed, an unknown name, a plugin failed under
``RLLM_PLUGINS_STRICT=1``, a contributed command could not be loaded), 2 usage error (``new`` refusing a request included).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from . import __version__, registry
from .discovery import manager
from .options import check_given_options
from .tables import format_table, plain, terminal_width
from .testing import check_estimator

__all__ = ["COMMAND_GROUP", "ContributedCommand", "build_parser", "contributed_commands", "estimator_rows", "main", "parse_args", "plugin_rows"]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
EXIT_BROKEN_PIPE = 128 + 13  # as if killed by SIGPIPE, like other command-line tools
COMMAND_GROUP = "rllm_plugins.commands"
BUILTIN_COMMANDS = ("estimators", "transforms", "shapers", "plugins", "check", "new", "bench")
FRAMEWORKS = (("verl", "verl"), ("TRL", "trl"))  # (name shown, distribution) of the frameworks --version reports
UNUSABLE_STATUSES = ("error", "conflict", "misplaced")


@dataclass(frozen=True)
class ContributedCommand:
    """A command of the entry-point group ``rllm_plugins.commands``: its name and every entry point offering it."""

    name: str
    entry_points: tuple[metadata.EntryPoint, ...]

    @staticmethod
    def origin(ep: metadata.EntryPoint) -> str:
        """``"distribution version (module:function)"`` of one entry point."""
        dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist else "unknown distribution"
        return f"{dist} ({ep.value})"

    @property
    def origins(self) -> str:
        return "; ".join(map(self.origin, self.entry_points))

    @property
    def summary(self) -> str | None:
        """The first sentence of the command module's docstring, read from its file without importing it (None if not found)."""
        import ast  # only for --help
        from importlib.util import find_spec
        from pathlib import Path

        top, *rest = self.entry_points[0].module.split(".")
        try:
            spec = find_spec(top)  # a top-level lookup imports nothing
            places = list(spec.submodule_search_locations or []) if spec else []
            candidates = [Path(place, *rest).with_suffix(".py") for place in places] + [Path(place, *rest, "__init__.py") for place in places]
            if spec and spec.origin and not rest:
                candidates.insert(0, Path(spec.origin))
            source = next((c for c in candidates if c.is_file()), None)
            docstring = ast.get_docstring(ast.parse(source.read_text(encoding="utf-8"))) if source else None
        except (ImportError, OSError, SyntaxError, ValueError):
            return None
        return plain(docstring.split("\n\n")[0].replace("\n", " ").split(". ")[0].rstrip(".")) if docstring else None


def contributed_commands() -> dict[str, ContributedCommand]:
    """The contributed commands by name (nothing is imported)."""
    by_name: dict[str, list[metadata.EntryPoint]] = {}
    for ep in manager.entry_points(COMMAND_GROUP):
        by_name.setdefault(ep.name, []).append(ep)
    return {name: ContributedCommand(name, tuple(eps)) for name, eps in by_name.items()}


def estimator_rows() -> list[dict[str, Any]]:
    """One row per selectable estimator (aliases folded in), plus one per conflicting name, sorted by name."""
    state = manager.plugin_state()
    names = registry.available_estimators()
    resolved = {name: registry.get_estimator(name) for name in names}
    names_by_spec: dict[int, list[str]] = {}
    for name in names:
        names_by_spec.setdefault(id(resolved[name].spec), []).append(name)
    rows = []
    for spec_names in names_by_spec.values():
        estimator = resolved[spec_names[0]]
        primary = estimator.spec.name if estimator.spec.name in spec_names else spec_names[0]
        provider = estimator.provider
        rows.append(
            {
                "name": primary,
                "aliases": [n for n in spec_names if n != primary],
                "kind": provider.kind,
                "provider": str(provider),
                "plugin": provider.plugin,
                "distribution": provider.distribution,
                "version": provider.version,
                "level": estimator.spec.level,
                "stateful": estimator.spec.stateful,
                "description": estimator.spec.description,
            }
        )
    for name, providers in state.conflicts.items():
        if name in resolved:  # user code registered the name explicitly
            continue
        rows.append(
            {
                "name": name,
                "aliases": [],
                "kind": "conflict",
                "provider": "; ".join(str(p) for p in providers),
                "plugin": None,
                "distribution": None,
                "version": None,
                "level": None,
                "stateful": None,
                "description": f"unusable: offered by {len(providers)} plugins; disable all but one with {manager.DISABLE_ENV}",
            }
        )
    return sorted(rows, key=lambda row: row["name"])


def plugin_rows() -> list[dict[str, Any]]:
    """One row per plugin: name, distribution, version, status, estimators, error.

    An entry point declared in a near-miss group (``rllm_plugin``, ``verl.plugin``), which nothing
    loads, is a row with status ``misplaced``.
    """
    from .discovery.mistakes import misplaced_entry_points

    offers: dict[str, Any] = {"estimators": [], "transforms": [], "shapers": []}
    misplaced = [
        {"name": m.name, "distribution": m.distribution, "version": m.version, "status": "misplaced", **offers, "error": str(m)}
        for m in misplaced_entry_points()
    ]
    return [record.as_dict() for record in manager.plugin_state().records] + misplaced


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    return format_table(headers, rows, width=terminal_width())


def _short_provider(row: dict[str, Any]) -> str:
    """The provider in a few words for the table (the JSON has it in full): ``built-in``, a distribution and version, ``user code``."""
    if row["kind"] == "plugin":
        return f"{row['distribution']} {row['version']}" if row["distribution"] else str(row["plugin"])
    return {"builtin": "built-in", "user": "user code"}.get(row["kind"], row["kind"])


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))


def _cmd_estimators(args: argparse.Namespace) -> int:
    rows = estimator_rows()
    if args.json:
        _print_json(rows)
        return EXIT_OK
    table = []
    for row in rows:
        name = row["name"] + (f" ({', '.join(row['aliases'])})" if row["aliases"] else "")
        table.append([name, row["level"] or "-", _short_provider(row), plain(row["description"])])
    print(_table(["NAME (ALIASES)", "LEVEL", "PROVIDER", "DESCRIPTION"], table))
    return EXIT_OK


def transform_rows() -> list[dict[str, Any]]:
    """One row per selectable advantage transform: name, level, elementwise, options (with defaults), context it reads, provider, description."""
    from .transform_spec import transform_context, transform_options
    from .transforms.registry import all_transforms

    rows = []
    for name, transform in sorted(all_transforms().items()):
        spec = transform.spec
        options = {k: (None if v is inspect.Parameter.empty else v) for k, v in transform_options(spec).items()}
        rows.append(
            {
                "name": name,
                "level": spec.level,
                "elementwise": spec.elementwise,
                "options": options,
                "context": sorted(transform_context(spec)),
                "kind": transform.provider.kind,
                "provider": str(transform.provider),
                "description": spec.description,
            }
        )
    return rows


def _cmd_transforms(args: argparse.Namespace) -> int:
    rows = transform_rows()
    if args.json:
        _print_json(rows)
        return EXIT_OK
    table = [
        [r["name"], r["level"], ", ".join(f"{k}={v!r}" for k, v in r["options"].items()) or "-", _short_provider(r), plain(r["description"])] for r in rows
    ]
    print(_table(["NAME", "LEVEL", "OPTIONS", "PROVIDER", "DESCRIPTION"], table))
    return EXIT_OK


def shaper_rows() -> list[dict[str, Any]]:
    """One row per selectable reward shaper: name, options (with defaults), context it reads, provider, description."""
    from .shaper_spec import shaper_context, shaper_options
    from .shaping.registry import all_shapers

    rows = []
    for name, shaper in sorted(all_shapers().items()):
        spec = shaper.spec
        options = {k: (None if v is inspect.Parameter.empty else v) for k, v in shaper_options(spec).items()}
        context = sorted(shaper_context(spec) | set(spec.requires))
        rows.append(
            {
                "name": name,
                "options": options,
                "context": context,
                "kind": shaper.provider.kind,
                "provider": str(shaper.provider),
                "description": spec.description,
            }
        )
    return rows


def _cmd_shapers(args: argparse.Namespace) -> int:
    rows = shaper_rows()
    if args.json:
        _print_json(rows)
        return EXIT_OK
    table = [[r["name"], ", ".join(f"{k}={v!r}" for k, v in r["options"].items()) or "-", _short_provider(r), plain(r["description"])] for r in rows]
    print(_table(["NAME", "OPTIONS", "PROVIDER", "DESCRIPTION"], table))
    return EXIT_OK


def _check_shaper(name: str, options: dict[str, Any] | None, as_json: bool) -> int:
    """``check NAME`` for a reward shaper: its contract (:mod:`rllm_plugins.shaping.contract`)."""
    from .shaping.contract import check_shaper

    try:
        report = check_shaper(name, options)
    except ValueError as e:
        print(e, file=sys.stderr)
        return EXIT_FAILURE
    print(json.dumps(report.as_dict(), indent=2) if as_json else report)
    return EXIT_OK if report.ok else EXIT_FAILURE


def _check_transform(name: str, options: dict[str, Any] | None, as_json: bool) -> int:
    """``check NAME`` for an advantage transform: its contract (:mod:`rllm_plugins.transforms.contract`)."""
    from .transforms.contract import check_transform

    try:
        report = check_transform(name, options)
    except ValueError as e:
        print(e, file=sys.stderr)  # it names the setting: rllm-plugins check ...
        return EXIT_FAILURE
    print(json.dumps(report.as_dict(), indent=2) if as_json else report)
    return EXIT_OK if report.ok else EXIT_FAILURE


def _strict_verdict(rows: Sequence[dict[str, Any]]) -> int:
    """``plugins --strict``: exit 1, saying which, when a plugin is not usable (``disabled`` is a choice, not a failure)."""
    unusable = [f"{r['name']} ({r['status']})" for r in rows if r["status"] in UNUSABLE_STATUSES]
    if not unusable:
        return EXIT_OK
    print(f"rllm-plugins plugins --strict: {len(unusable)} plugin(s) not usable: {', '.join(unusable)}", file=sys.stderr)
    return EXIT_FAILURE


def _cmd_plugins(args: argparse.Namespace) -> int:
    rows = plugin_rows()
    if args.json:
        _print_json(rows)
        return _strict_verdict(rows) if args.strict else EXIT_OK
    table = [[r["name"], r["distribution"] or "-", r["version"] or "-", r["status"], ", ".join(r["estimators"]) or "-"] for r in rows]
    print(_table(["PLUGIN", "DISTRIBUTION", "VERSION", "STATUS", "ESTIMATORS"], table))
    errors = [r for r in rows if r["error"]]
    if errors:
        print()
        for r in errors:
            print(f"{r['name']}: {r['error']}")
    return _strict_verdict(rows) if args.strict else EXIT_OK


def _cmd_check(args: argparse.Namespace) -> int:
    try:
        options = json.loads(args.options) if args.options else None
    except json.JSONDecodeError as e:
        print(f"rllm-plugins check: --options must be a JSON object, e.g. '{{\"gamma\": 0.9}}': {e}", file=sys.stderr)
        return EXIT_FAILURE
    if options is not None and not isinstance(options, dict):
        print(f"rllm-plugins check: --options must be a JSON object of option names to values, got {args.options}", file=sys.stderr)
        return EXIT_FAILURE
    from .shaping.registry import available_shapers
    from .transforms.registry import available_transforms

    key = args.name.strip().lower()
    if key in available_transforms() and key not in registry.available_estimators():
        return _check_transform(args.name, options, args.json)
    if key in available_shapers() and key not in registry.available_estimators():
        return _check_shaper(args.name, options, args.json)
    try:
        estimator = registry.get_estimator(args.name)
    except (registry.UnknownEstimatorError, registry.EstimatorConflictError) as e:
        import difflib  # a transform's name mistyped is unknown as an estimator too: name the transform it is close to

        unknown = isinstance(e, registry.UnknownEstimatorError)
        hint = ""
        for kind, names in (("advantage transforms", available_transforms()), ("reward shapers", available_shapers())):
            close = difflib.get_close_matches(key, names, n=1)
            hint += f" Among the {kind}: did you mean {close[0]!r}?" if unknown and close else ""
        print(f"rllm-plugins check: {e}{hint}", file=sys.stderr)
        return EXIT_FAILURE
    try:  # before any rule runs: unknown names, wrong types and values out of range, or options missing
        norm_field = "the framework's norm_adv_by_std_in_grpo (the rules pass True)"
        check_given_options(args.name, estimator, options or {}, where="rllm-plugins check --options", norm_field=norm_field)
    except ValueError as e:
        print(e, file=sys.stderr)
        return EXIT_FAILURE
    if args.paths:
        return _check_paths(args.name, options, args.json, args.seed)
    report = check_estimator(args.name, options=options)
    if args.json:
        _print_json(report.as_dict())
    else:
        print(report)
    return EXIT_OK if report.ok else EXIT_FAILURE


def _check_paths(name: str, options: dict[str, Any] | None, as_json: bool, seed: int) -> int:
    """``check NAME --paths``: the estimator's cells of the conformance matrix on every installed path and wrapper."""
    from .testing.matrix.report import cells_as_dicts, cells_table, check_paths

    cells = check_paths(name, options=options, seed=seed)
    if as_json:
        _print_json(cells_as_dicts(cells))
    else:
        print(f"conformance of estimator {name} on every installed path and wrapper, samples of seed {seed} (--seed):")
        print(cells_table(cells))
    return EXIT_FAILURE if any(c.status == "FAIL" for c in cells) else EXIT_OK


def _cmd_new(args: argparse.Namespace) -> int:
    """``new NAME``: write a plugin project; a request it refuses is one line on stderr and exit 2."""
    from pathlib import Path

    from .scaffold import ScaffoldError, default_directory, project_files, write_project

    try:
        files = project_files(args.name, args.kind, args.level, args.stateful)
        directory = Path(args.dir) if args.dir else default_directory(args.name)
        written = write_project(directory, files)
    except ScaffoldError as e:
        print(f"rllm-plugins new: {e}", file=sys.stderr)
        return EXIT_USAGE
    what = "advantage transform" if args.kind == "transform" else f"{args.level or 'outcome'}-level{' stateful' if args.stateful else ''} estimator"
    print(f"created {directory} (the {what} {args.name}):")
    for path in written:
        print(f"  {path.relative_to(directory).as_posix()}")
    print(f"next: cd {directory} && pip install -e '.[test]' && python -m pytest")
    return EXIT_OK


def _cmd_bench(args: argparse.Namespace) -> int:
    """``bench``: :func:`rllm_plugins.bench.command.run` (exit 2 for a request it cannot run, 1 for a failed correctness gate)."""
    from .bench.command import run

    return run(args)


def _run_contributed(command: ContributedCommand, argv: list[str]) -> int:
    where = f"rllm-plugins {command.name}"
    if len(command.entry_points) > 1:
        print(f"{where}: the command is contributed by {len(command.entry_points)} distributions: {command.origins}. Uninstall all but one.", file=sys.stderr)
        return EXIT_FAILURE
    ep = command.entry_points[0]
    try:
        run = ep.load()
    except Exception as e:
        if manager.strict():
            traceback.print_exception(e)
        print(f"{where}: cannot load the command from {command.origin(ep)}: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_FAILURE
    return int(run(argv) or 0)


def version_line() -> str:
    """``rllm-plugins 0.1.0 (verl 0.9.1, TRL 1.16.0)``: this distribution and the frameworks installed beside it (none imported)."""
    found = []
    for shown, distribution in FRAMEWORKS:
        try:
            found.append(f"{shown} {metadata.version(distribution)}")
        except metadata.PackageNotFoundError:
            found.append(f"{shown} not installed")
    return f"rllm-plugins {__version__} ({', '.join(found)})"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``rllm-plugins``: the built-in commands and every contributed one."""
    contributed = contributed_commands()
    shadowed = [c for name, c in sorted(contributed.items()) if name in BUILTIN_COMMANDS]
    epilog = "".join(f"ignored: the command {c.name!r} of {c.origins}, a built-in command's name. " for c in shadowed) or None
    parser = argparse.ArgumentParser(prog="rllm-plugins", description="Inspect and check rLLM-native advantage estimators and their plugins.", epilog=epilog)
    parser.add_argument("--version", action="version", version=version_line(), help="show the version, and the verl and TRL versions found, and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, run: Callable[[argparse.Namespace], int], help_text: str, **kwargs: Any) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text, **kwargs)
        sub.set_defaults(run=run)
        return sub

    add("estimators", _cmd_estimators, "list every selectable estimator: name, aliases, provider, description").add_argument(
        "--json", action="store_true", help="print a JSON list instead of a table"
    )
    add("transforms", _cmd_transforms, "list every selectable advantage transform: name, level, options, provider, description").add_argument(
        "--json", action="store_true", help="print a JSON list instead of a table"
    )
    add("shapers", _cmd_shapers, "list every selectable reward shaper: name, options, provider, description").add_argument(
        "--json", action="store_true", help="print a JSON list instead of a table"
    )
    plugins_help = "list the built-ins and every installed plugin with its status (active, disabled, error, conflict, misplaced)"
    plugins_command = add("plugins", _cmd_plugins, plugins_help)
    plugins_command.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    plugins_command.add_argument("--strict", action="store_true", help="exit 1 when a plugin is in error, conflict or misplaced (for CI)")
    check_command = add(
        "check", _cmd_check, "check an estimator's (or an advantage transform's, or a reward shaper's) contract on synthetic groups; exit 1 if it fails"
    )
    check_command.add_argument("name", help="estimator, advantage transform or reward shaper name")
    check_command.add_argument("--json", action="store_true", help="print the report as JSON")
    check_command.add_argument(
        "--paths", action="store_true", help="run it through every installed path and wrapper (verl, TRL, composite, ...): a table of conformance cells"
    )
    check_command.add_argument("--seed", type=int, default=0, help="with --paths: the seed of the sample inputs (default 0; printed)")
    check_command.add_argument("--options", help='options for every call, a JSON object (e.g. \'{"terms": [["grpo", 0.5], ["rloo", 0.5]]}\')')
    new_command = add("new", _cmd_new, "write a complete plugin project: package, spec, tests that run the checks, CI workflow, README")
    new_command.add_argument("name", help="the estimator's (or transform's) name, as the registry keeps it: [a-z][a-z0-9_]*")
    new_command.add_argument("--kind", choices=("estimator", "transform"), default="estimator", help="an estimator (default) or an advantage transform")
    new_command.add_argument("--level", choices=("outcome", "step"), help="estimators: outcome (default; one advantage per trajectory) or step")
    new_command.add_argument("--stateful", action="store_true", help="an outcome-level estimator with memory across calls (a running mean baseline)")
    new_command.add_argument("--dir", help="the project folder, new or empty (default ./rllm-<name>, underscores as dashes)")
    from .bench.command import add_arguments as bench_arguments

    bench_help = "time estimators (built-ins, plugins, the frameworks' own) on a batch of your shape, dtype and device, each checked first"
    bench_arguments(add("bench", _cmd_bench, bench_help))
    for name, command in sorted(contributed.items()):
        if name in BUILTIN_COMMANDS:
            continue
        summary = command.summary
        help_text = f"{summary + '. ' if summary else ''}From {command.origins}; 'rllm-plugins {name} --help' for its arguments"
        sub = add(name, lambda args, command=command: _run_contributed(command, args.arguments), help_text, add_help=False)
        sub.add_argument("arguments", nargs=argparse.REMAINDER, help="passed to the command unchanged")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line; a contributed command keeps every argument after it, options included, in order."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if hasattr(args, "arguments"):  # leading options (e.g. --help) belong to the contributed command; the rest is in REMAINDER
        args.arguments = [*unknown, *args.arguments]
    elif unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.error(f"a command is required ({', '.join([*BUILTIN_COMMANDS, *sorted(set(contributed_commands()) - set(BUILTIN_COMMANDS))])})")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (usage errors exit with 2 from argparse).

    Output piped into a reader that stops early (``| head``) ends the command quietly.
    """
    try:
        args = parse_args(argv)
        try:
            code = args.run(args)
        except manager.PluginLoadError as e:
            traceback.print_exception(e.__cause__ or e)
            print(f"rllm-plugins: {e}", file=sys.stderr)
            code = EXIT_FAILURE
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's final flush of stdout must not fail again
        return EXIT_BROKEN_PIPE
