"""The arguments of ``rllm-plugins bench`` and what it does with them (:func:`add_arguments`, :func:`run`).

A request the bench cannot run (an unknown estimator or path, options or transforms refused, ``--device cuda`` where
torch sees no CUDA device, a shape no batch has) is one line on stderr and exit 2, before anything is measured. Exit 1:
a row failed its correctness gate (each failure one line on stderr, naming the estimator and the first differing
position); 0: every row passed and was timed.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["DEFAULT_ESTIMATORS", "BenchUsageError", "add_arguments", "config_from_args", "run"]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
DEFAULT_ESTIMATORS = "grpo,rloo,reinforce_plus_plus_baseline,gigpo,turn_grpo"
DTYPES = ("float32", "float64", "bfloat16", "float16")


class BenchUsageError(ValueError):
    """A request the bench cannot run (one line: what and why)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``rllm-plugins bench`` (nothing imported)."""
    what = parser.add_argument_group("what to run")
    what.add_argument(
        "--estimators",
        default=DEFAULT_ESTIMATORS,
        help=f"registered estimators (built-ins, plugins, user code), comma-separated (default {DEFAULT_ESTIMATORS})",
    )
    what.add_argument(
        "--options",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="options of one estimator, a JSON object (e.g. gigpo='{\"gamma\": 0.95}'); repeatable",
    )
    what.add_argument(
        "--own",
        metavar="NAMES",
        help="the frameworks' own estimators beside them, comma-separated (e.g. grpo,rloo_vectorized on verl; default: each path's usual ones; 'none': none)",
    )
    what.add_argument(
        "--transform",
        action="append",
        default=[],
        metavar="NAME[=JSON]",
        help="an advantage transform after every estimator, in order (e.g. clip='{\"max\": 1}'); repeatable",
    )
    what.add_argument(
        "--paths", help="where to run them, comma-separated: core, or a framework's path (verl); default: every framework path installed, else core"
    )
    what.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (where user code registers its estimators); repeatable",
    )
    batch = parser.add_argument_group("the batch")
    batch.add_argument("--rows", type=int, default=1024, help="rows B (default 1024)")
    batch.add_argument("--tokens", type=int, default=1024, help="response tokens per row T (default 1024)")
    batch.add_argument("--group-size", type=int, default=8, help="answers per prompt (default 8)")
    batch.add_argument("--turns", type=int, default=4, help="turns per row (step-level estimators compare them; default 4)")
    batch.add_argument(
        "--rewards", choices=("binary", "graded"), default="binary", help="binary: the last turn 0 or 1, the others 0 (default); graded: every turn 0, 0.5 or 1"
    )
    batch.add_argument("--dtype", choices=DTYPES, default="float32", help="the token rewards' dtype (default float32)")
    batch.add_argument("--device", default="cpu", help="cpu (default) or cuda / cuda:N where torch sees one")
    batch.add_argument("--seed", type=int, default=0, help="the batch's seed (default 0)")
    timing = parser.add_argument_group("timing and output")
    timing.add_argument("--repeats", type=int, default=5, help="medians taken; the smallest is reported (default 5)")
    timing.add_argument("--budget", type=float, default=1.0, help="seconds of timed calls per row, over all repeats (default 1.0)")
    timing.add_argument("--min-runs", type=int, default=3, help="timed calls per median at least (default 3)")
    timing.add_argument("--no-memory", action="store_true", help="skip the peak memory (the torch profiler's run)")
    timing.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE")


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise BenchUsageError(f"{what} must be a JSON object: {e}") from None
    if not isinstance(value, dict):
        raise BenchUsageError(f"{what} must be a JSON object, got {text}")
    return value


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())


def _device(device: str) -> str:
    if device == "cpu":
        return device
    if not device.startswith("cuda"):
        raise BenchUsageError(f"--device {device}: cpu or cuda (cuda:N)")
    try:
        import torch
    except ImportError:
        raise BenchUsageError(f"--device {device}: torch is not installed") from None
    if not torch.cuda.is_available():
        raise BenchUsageError(f"--device {device}: torch sees no CUDA device (torch.cuda.is_available() is False)")
    index = device.partition(":")[2]
    if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
        raise BenchUsageError(f"--device {device}: torch sees {torch.cuda.device_count()} CUDA device(s)")
    return device


def config_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~rllm_plugins.bench.engine.BenchConfig` of the arguments; :class:`BenchUsageError` for a request it cannot run."""
    import importlib

    from .. import registry
    from ..options import check_given_options
    from .batch import Shape, ShapeError
    from .engine import BenchConfig, Request
    from .paths import available_paths

    for module in args.imports:
        try:
            importlib.import_module(module)
        except Exception as e:
            raise BenchUsageError(f"--import {module}: {type(e).__name__}: {_one_line(e)}") from None
    shape = Shape(args.rows, args.tokens, args.group_size, args.turns)
    try:
        shape.check()
    except ShapeError as e:
        raise BenchUsageError(f"bad shape: {e}") from None
    for what, value in (("--repeats", args.repeats), ("--min-runs", args.min_runs)):
        if value < 1:
            raise BenchUsageError(f"{what} must be at least 1, got {value}")
    if not args.budget >= 0:
        raise BenchUsageError(f"--budget must be 0 or more seconds, got {args.budget}")
    device = _device(args.device)
    options: dict[str, dict[str, Any]] = {}
    for given in args.options:
        name, sep, text = given.partition("=")
        if not sep:
            raise BenchUsageError(f"--options {given}: NAME=JSON, e.g. gigpo='{{\"gamma\": 0.95}}'")
        options[name.strip()] = _json_object(text, f"--options {name.strip()}")
    estimators = [n for n in _names(args.estimators) if n != "none"]
    unused = sorted(set(options) - set(estimators))
    if unused:
        raise BenchUsageError(f"--options {unused[0]}: not among --estimators ({', '.join(estimators)})")
    chosen: list[tuple[str, dict[str, Any]]] = []
    for name in estimators:
        try:
            estimator = registry.get_estimator(name)
        except (registry.UnknownEstimatorError, registry.EstimatorConflictError) as e:
            raise BenchUsageError(_one_line(e)) from None
        given = options[name] if name in options else _sample_options(name)
        try:
            check_given_options(name, estimator, given, where=f"--options {name}", norm_field="the framework's norm_adv_by_std_in_grpo (the bench passes True)")
        except ValueError as e:
            raise BenchUsageError(_one_line(e)) from None
        chosen.append((name, given))
    transforms = tuple(_transform(t) for t in args.transform)
    if transforms:
        from ..transforms import resolve_transforms

        try:
            resolve_transforms([[n, o] for n, o in transforms], "--transform")
        except ValueError as e:
            raise BenchUsageError(_one_line(e)) from None
    found = available_paths()
    frameworks = [name for name, p in found.items() if name != "core" and not isinstance(p, str) and device.split(":")[0] in p.devices]
    names = _names(args.paths) if args.paths else (frameworks or ["core"])
    paths = {}
    for name in names:
        path = found.get(name)
        if path is None:
            raise BenchUsageError(f"--paths: no path {name!r}; the paths: {', '.join(found)}")
        if isinstance(path, str):
            raise BenchUsageError(f"--paths {name}: {path}")
        if device.split(":")[0] not in path.devices:
            raise BenchUsageError(f"--paths {name}: it runs on {', '.join(path.devices)}, not {device}")
        if args.dtype not in path.dtypes:
            raise BenchUsageError(f"--paths {name}: it takes {', '.join(path.dtypes)} rewards, not {args.dtype}")
        paths[name] = path
    requests = [Request(path, name, given) for name, given in chosen for path in paths]
    own = [n for n in _names(args.own) if n != "none"] if args.own else None
    if own:
        checked = sorted({n for p in paths.values() for n in p.own})
        unknown = [n for n in own if n not in checked]
        if unknown:
            raise BenchUsageError(
                f"--own {unknown[0]}: not a framework estimator the bench checks on {', '.join(paths)}; those it checks: {', '.join(checked) or 'none'}"
            )
    for path in paths.values():
        wanted = path.own_default if own is None else own
        requests += [Request(path.name, n, {}, own=True) for n in wanted if n in path.own]
    if not requests:
        raise BenchUsageError("nothing to run: name --estimators or --own")
    return BenchConfig(
        shape,
        tuple(sorted(requests, key=lambda r: list(paths).index(r.path))),
        paths,
        transforms,
        args.dtype,
        device,
        args.rewards,
        args.seed,
        args.repeats,
        args.budget,
        args.min_runs,
        not args.no_memory,
    )


def _sample_options(name: str) -> dict[str, Any]:
    """The options the conformance matrix calls a built-in with when it needs some (``composite``'s terms, ``pkpo``'s k)."""
    from ..testing.matrix.estimators import SAMPLES

    settings = SAMPLES.get(name)
    return dict(settings.options) if settings else {}


def _transform(text: str) -> tuple[str, dict[str, Any]]:
    name, sep, options = text.partition("=")
    return name.strip(), (_json_object(options, f"--transform {name.strip()}") if sep else {})


def run(args: argparse.Namespace) -> int:
    """``rllm-plugins bench``: the table on stdout (and the JSON in ``--json``); exit 0, 1 (a gate failed) or 2 (see the module docstring)."""
    try:
        config = config_from_args(args)
    except BenchUsageError as e:
        print(f"rllm-plugins bench: {e}", file=sys.stderr)
        return EXIT_USAGE
    from .engine import failures, run_bench, table
    from .timing import describe_machine

    report = run_bench(config)
    print(f"Machine: {describe_machine(report['machine'])}\n")
    print(table(report).markdown())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, ensure_ascii=False)
    failed = failures(report)
    for message in failed:
        print(f"rllm-plugins bench: correctness gate failed: {message}", file=sys.stderr)
    return EXIT_FAILURE if failed else EXIT_OK
