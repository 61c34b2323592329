"""The ``rllm-plugins`` command (also ``python -m rllm_plugins``).

``estimators [--json]``  every selectable estimator name, its provider and description;
``plugins [--json]``     every plugin (built-ins and entry points) and its status;
``check NAME``           the contract check of one estimator (:func:`rllm_plugins.testing.check_estimator`);
``verl-check ARGS...``   hands its arguments to ``rllm_verl.check`` (needs the ``[verl]`` extra).

Exit codes: 0 success, 1 failure (a check failed, an unknown name, a plugin failed under
``RLLM_PLUGINS_STRICT=1``), 2 usage error. verl and TRL are only imported by ``verl-check``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from . import plugins, registry
from .testing import check_estimator

__all__ = ["build_parser", "estimator_rows", "main", "parse_args", "plugin_rows"]

EXIT_OK, EXIT_FAILURE = 0, 1


def estimator_rows() -> list[dict[str, Any]]:
    """One row per selectable estimator (aliases folded in), plus one per conflicting name, sorted by name."""
    state = plugins.plugin_state()
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
                "description": f"unusable: offered by {len(providers)} plugins; disable all but one with {plugins.DISABLE_ENV}",
            }
        )
    return sorted(rows, key=lambda row: row["name"])


def plugin_rows() -> list[dict[str, Any]]:
    """One row per plugin: name, distribution, version, status, estimators, error."""
    return [record.as_dict() for record in plugins.plugin_state().records]


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = [headers, *rows]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines)


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
        table.append([name, row["provider"], row["description"]])
    print(_table(["NAME (ALIASES)", "PROVIDER", "DESCRIPTION"], table))
    return EXIT_OK


def _cmd_plugins(args: argparse.Namespace) -> int:
    rows = plugin_rows()
    if args.json:
        _print_json(rows)
        return EXIT_OK
    table = [[r["name"], r["distribution"] or "-", r["version"] or "-", r["status"], ", ".join(r["estimators"]) or "-"] for r in rows]
    print(_table(["PLUGIN", "DISTRIBUTION", "VERSION", "STATUS", "ESTIMATORS"], table))
    errors = [r for r in rows if r["error"]]
    if errors:
        print()
        for r in errors:
            print(f"{r['name']}: {r['error']}")
    return EXIT_OK


def _cmd_check(args: argparse.Namespace) -> int:
    try:
        registry.get_estimator(args.name)
    except (registry.UnknownEstimatorError, registry.EstimatorConflictError) as e:
        print(f"rllm-plugins check: {e}", file=sys.stderr)
        return EXIT_FAILURE
    report = check_estimator(args.name)
    print(report)
    return EXIT_OK if report.ok else EXIT_FAILURE


def _cmd_verl_check(args: argparse.Namespace) -> int:
    try:
        from rllm_verl.check import main as verl_check_main
    except ImportError as e:
        print(
            f"rllm-plugins verl-check needs verl and the rllm_verl adapter: pip install 'rllm-plugins[verl]' (import failed: {type(e).__name__}: {e})",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    return int(verl_check_main(list(args.overrides)) or 0)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``rllm-plugins``."""
    parser = argparse.ArgumentParser(prog="rllm-plugins", description="Inspect and check rLLM-native advantage estimators and their plugins.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, run: Callable[[argparse.Namespace], int], help_text: str, **kwargs: Any) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text, **kwargs)
        sub.set_defaults(run=run)
        return sub

    add("estimators", _cmd_estimators, "list every selectable estimator: name, aliases, provider, description").add_argument(
        "--json", action="store_true", help="print a JSON list instead of a table"
    )
    add("plugins", _cmd_plugins, "list the built-ins and every installed plugin with its status (active, disabled, error, conflict)").add_argument(
        "--json", action="store_true", help="print a JSON list instead of a table"
    )
    add("check", _cmd_check, "check an estimator's contract on synthetic groups; exit 1 if it fails").add_argument("name", help="estimator name")
    add("verl-check", _cmd_verl_check, "check a verl configuration with rllm_verl.check (arguments are passed through)", add_help=False).add_argument(
        "overrides", nargs=argparse.REMAINDER, help="arguments of rllm_verl.check, e.g. algorithm.adv_estimator=rllm_rloo"
    )
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line; ``verl-check`` keeps every argument after it, options included, in order."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if args.command == "verl-check":  # leading options (e.g. --help) belong to rllm_verl.check; the rest is in REMAINDER
        args.overrides = [*unknown, *args.overrides]
    elif unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.error("a command is required (estimators, plugins, check, verl-check)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (usage errors exit with 2 from argparse)."""
    args = parse_args(argv)
    try:
        return args.run(args)
    except plugins.PluginLoadError as e:
        print(f"rllm-plugins: {e}", file=sys.stderr)
        return EXIT_FAILURE
