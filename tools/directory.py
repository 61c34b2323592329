"""The plugin directory: ``docs/directory.toml`` (one entry per selectable name) rendered as ``docs/directory.md``.

``python tools/directory.py``            renders the page from the entries, the registry of this environment (level,
                                         options and their defaults, provider) and the stored check results;
``python tools/directory.py --results``  first reruns ``rllm-plugins check NAME --json`` for every entry installed here
                                         and stores the verdicts in ``docs/directory_results.json`` (``make directory``);
``python tools/directory.py --check``    writes nothing; exits 1 if the page is not what it renders now.

An entry whose distribution is not installed here is listed with what its line says; its options, level and
check result read "not installed here" until someone with it installed runs ``make directory``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import inspect
import io
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[1]
ENTRIES = ROOT / "docs" / "directory.toml"
RESULTS = ROOT / "docs" / "directory_results.json"
PAGE = ROOT / "docs" / "directory.md"
KINDS = ("estimator", "transform")
FIELDS = {"name": True, "kind": True, "distribution": True, "source": True, "description": True, "check_options": False}
PROJECT = "rllm-plugins"  # the distribution whose names are built in
REFRESH = "make directory"  # reruns the checks, then renders the page
RENDER = "python tools/directory.py"


class DirectoryError(ValueError):
    """An entry of docs/directory.toml that cannot be listed: the message names the entry and the fix."""


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str
    distribution: str
    source: str
    description: str
    check_options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def check_command(self) -> list[str]:
        """The arguments of ``rllm-plugins`` that check this entry."""
        options = ["--options", json.dumps(dict(self.check_options), separators=(",", ":"))] if self.check_options else []
        return ["check", self.name, "--json", *options]


def load_entries(path: Path = ENTRIES) -> list[Entry]:
    """The entries of the directory file, each checked for its fields; a name listed twice is refused."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise DirectoryError(f"{path.name}: not valid TOML: {e}") from e
    entries, seen = [], set()
    for number, raw in enumerate(data.get("entry", []), start=1):
        where = f"{path.name}: entry {number} ({raw.get('name', 'no name')!r})"
        missing = [key for key, required in FIELDS.items() if required and not isinstance(raw.get(key), str)]
        unknown = sorted(set(raw) - set(FIELDS))
        if missing or unknown:
            raise DirectoryError(
                f"{where}: {'needs ' + ', '.join(missing) if missing else ''}{'; ' if missing and unknown else ''}"
                f"{'unknown field(s) ' + ', '.join(unknown) if unknown else ''} (fields: {', '.join(FIELDS)})"
            )
        if not re.fullmatch(r"[a-z][a-z0-9_]*", raw["name"]):
            raise DirectoryError(f"{where}: name must be lower case letters, digits and underscores, starting with a letter")
        if raw["kind"] not in KINDS:
            raise DirectoryError(f"{where}: kind must be one of {', '.join(KINDS)}, got {raw['kind']!r}")
        if not isinstance(raw.get("check_options", {}), dict):
            raise DirectoryError(f"{where}: check_options must be a table, e.g. {{ k = 4 }}")
        if "\n" in raw["description"] or not raw["description"].strip():
            raise DirectoryError(f"{where}: description must be one non-empty line")
        if (raw["kind"], raw["name"]) in seen:
            raise DirectoryError(f"{where}: the {raw['kind']} {raw['name']!r} is listed twice")
        seen.add((raw["kind"], raw["name"]))
        entries.append(Entry(**raw))
    return entries


def _distribution_installed(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _default(value: Any) -> str:
    return "required" if value is inspect.Parameter.empty else repr(value)


def registered(entry: Entry) -> dict[str, Any] | None:
    """What the registry of this environment says of ``entry`` (None where its name is not registered as its kind)."""
    if entry.kind == "estimator":
        from rllm_plugins.options import spec_options
        from rllm_plugins.registry import available_estimators, get_estimator

        if entry.name not in available_estimators():
            return None
        estimator = get_estimator(entry.name)
        spec, provider = estimator.spec, estimator.provider
        options = spec_options(spec)
        level = spec.level + (", stateful" if spec.stateful else "")
        shown = {k: _default(v) for k, v in options.defaults.items()}
        if options.open:
            shown["**kwargs"] = "any"
    else:
        from rllm_plugins.transform_spec import transform_options
        from rllm_plugins.transforms.registry import all_transforms

        transform = all_transforms().get(entry.name)
        if transform is None:
            return None
        spec, provider = transform.spec, transform.provider
        level = spec.level
        shown = {k: _default(v) for k, v in transform_options(spec).items()}
    distribution = PROJECT if provider.kind == "builtin" else provider.distribution
    return {"level": level, "options": shown, "distribution": distribution, "provider": provider.kind}


def problems(entries: Sequence[Entry]) -> list[str]:
    """Every entry whose distribution is installed here but whose name is not registered by it, as its kind."""
    found = []
    for entry in entries:
        if not _distribution_installed(entry.distribution):
            continue
        facts = registered(entry)
        if facts is None:
            found.append(f"{entry.name}: {entry.distribution} is installed but registers no {entry.kind} named {entry.name!r}")
        elif facts["distribution"] != entry.distribution:
            found.append(f"{entry.name}: the {entry.kind} {entry.name!r} comes from {facts['distribution']}, not {entry.distribution}")
    return found


# ---------------------------------------------------------------- the checks


def summary(kind: str, exit_code: int, report: Mapping[str, Any] | None, error: str) -> dict[str, Any]:
    """The stored verdict of one ``rllm-plugins check NAME --json``: ok, how many rules passed or were skipped, which failed."""
    if report is None:
        return {"ok": False, "exit": exit_code, "passed": 0, "skipped": 0, "failed": [], "error": error.strip().splitlines()[-1] if error.strip() else ""}
    rules = report["rules"]
    statuses = [(r["rule"], r["status"] if kind == "estimator" else "pass" if r["ok"] else "FAIL") for r in rules]  # a transform's rule: ok or not
    return {
        "ok": bool(report["ok"]) and exit_code == 0,
        "exit": exit_code,
        "passed": sum(status == "pass" for _, status in statuses),
        "skipped": sum(status == "skipped" for _, status in statuses),
        "failed": [rule for rule, status in statuses if status not in ("pass", "skipped")],
        "error": "",
    }


def run_check(entry: Entry) -> dict[str, Any]:
    """``rllm-plugins check NAME --json [--options ...]`` of one entry, run in this process, as its stored verdict."""
    from rllm_plugins.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(entry.check_command)
    try:
        report = json.loads(out.getvalue())
    except json.JSONDecodeError:
        report = None
    return {"command": "rllm-plugins " + " ".join(_quoted(entry.check_command)), **summary(entry.kind, code, report, err.getvalue())}


def _quoted(argv: Sequence[str]) -> list[str]:
    import shlex

    return [shlex.quote(a) for a in argv]


def run_checks(entries: Sequence[Entry]) -> dict[str, Any]:
    """The check of every entry installed here, keyed ``kind:name``; the others are left out (the page says not installed)."""
    results = {}
    for entry in entries:
        if registered(entry) is not None:
            results[f"{entry.kind}:{entry.name}"] = run_check(entry)
    return {"produced_by": REFRESH, "results": results}


def load_results(path: Path = RESULTS) -> dict[str, Any]:
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8")).get("results", {})


# ---------------------------------------------------------------- the page


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _source(entry: Entry) -> str:
    if entry.source == PROJECT:
        return "built in (`rllm-plugins`)"
    if re.match(r"https?://", entry.source):
        return f"<{entry.source}>"
    if (ROOT / entry.source).exists():
        return f"[{entry.source}](../{entry.source})"
    return f"package index: `pip install {entry.source}`"


def _verdict(result: Mapping[str, Any] | None) -> str:
    if result is None:
        return "not run"
    if result["error"]:
        return f"**error**: {result['error']}"
    skipped = f", {result['skipped']} skipped" if result["skipped"] else ""
    if result["ok"]:
        return f"pass ({result['passed']} rules{skipped})"
    return f"**FAIL**: {', '.join(result['failed'])} ({result['passed']} passed{skipped})"


def render(entries: Sequence[Entry], results: Mapping[str, Any]) -> str:
    """The markdown of docs/directory.md."""
    lines = [
        "# Plugin directory",
        "",
        "<!-- generated by python tools/directory.py from docs/directory.toml and docs/directory_results.json: edit those, then run make directory -->",
        "",
        "Every estimator and advantage transform selectable by name that this directory knows of: the built-ins, the",
        "repository's example plugin and published plugins. Its source is [directory.toml](directory.toml), one `[[entry]]`",
        "per name; `make directory` checks each entry installed here with `rllm-plugins check NAME --json` (the estimator",
        "contract checker or the transform checker, [reliability.md](reliability.md)), stores the verdicts in",
        "[directory_results.json](directory_results.json) and renders this page. Level and options with their defaults",
        "come from the registry of the environment that rendered the page.",
        "",
        "To list your plugin, add an entry per name it registers at the end of `docs/directory.toml` (the comment at the",
        "top of the file shows one), install it next to `rllm-plugins` and run `make directory`. How to write and",
        "publish a plugin: [plugins.md](plugins.md).",
    ]
    for kind, title in (("estimator", "Estimators"), ("transform", "Advantage transforms")):
        lines += ["", f"## {title}", "", "| name | level | options (defaults) | description | provider | source | check |", "|---|---|---|---|---|---|---|"]
        for entry in (e for e in entries if e.kind == kind):
            facts = registered(entry)
            if facts is None:
                level = options = "not installed here"
            else:
                level = facts["level"]
                options = ", ".join(f"`{k}={v}`" for k, v in facts["options"].items()) or "none"
            provider = "built-in" if entry.distribution == PROJECT else f"plugin, `{entry.distribution}`"
            verdict = _verdict(results.get(f"{kind}:{entry.name}"))
            if entry.check_options:
                verdict += ", with " + ", ".join(f"`{k}={v!r}`" for k, v in entry.check_options.items())
            row = [f"`{entry.name}`", level, options, entry.description, provider, _source(entry), verdict]
            lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return "\n".join(lines) + "\n"


def rendered_now() -> str:
    return render(load_entries(), load_results())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/directory.py", description="Render docs/directory.md from docs/directory.toml.")
    parser.add_argument("--results", action="store_true", help="first rerun the checks of every entry installed here into docs/directory_results.json")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if docs/directory.md is not what this renders now")
    args = parser.parse_args(argv)
    try:
        entries = load_entries()
    except DirectoryError as e:
        print(f"tools/directory.py: {e}", file=sys.stderr)
        return 1
    wrong = problems(entries)
    if wrong:
        print("tools/directory.py: " + "; ".join(wrong), file=sys.stderr)
        return 1
    if args.check:
        if PAGE.is_file() and PAGE.read_text(encoding="utf-8") == render(entries, load_results()):
            return 0
        print(f"docs/directory.md is not what {RENDER} renders now: run {REFRESH}", file=sys.stderr)
        return 1
    if args.results:
        stored = run_checks(entries)
        RESULTS.write_text(json.dumps(stored, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        failed = [key for key, result in stored["results"].items() if not result["ok"]]
        print(f"{RESULTS.relative_to(ROOT)}: {len(stored['results'])} checked, {len(failed)} failed{': ' + ', '.join(failed) if failed else ''}")
    PAGE.write_text(render(entries, load_results()), encoding="utf-8")
    print(f"{PAGE.relative_to(ROOT)}: {len(entries)} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
