"""The checks of estimators and advantage transforms as pytest items: :func:`parametrize_with_checks`.

As scikit-learn's ``parametrize_with_checks`` does for estimators, it turns the checks of a plugin's names into one
parametrized item per rule, so a plugin's own test suite (and its CI) runs them with readable failures::

    from rllm_plugins.testing import parametrize_with_checks


    @parametrize_with_checks(["my_estimator"], expected_failures={"my_estimator": {"permutation_equivariant": "why"}})
    def test_conformance(check):
        check()

For an estimator: one item per rule of :func:`~rllm_plugins.testing.check_estimator` (the outcome, step or state
rules its spec calls for), then one per cell of the conformance matrix (``rllm-plugins check NAME --paths``): each
path and wrapper it takes times each relation. The paths are grouped as the command finds them: ``core`` and each
entry point of ``rllm_plugins.conformance_paths`` (``trl``, ``verl``, ``verl_v1``); a group whose framework is not
installed is one skipped item saying so. For an advantage transform: one item per rule of
:func:`~rllm_plugins.transforms.contract.check_transform`.

Each check runs once per name (a rule's item reads the report its first item made); a skipped rule, and a
cell the matrix marks ``n.a.``, is a skipped item with the reason. ``expected_failures`` declares checks that fail
on purpose, each with its reason: the item is ``xfail(strict=True)``, so an expected failure that passes fails the
run (``XPASS(strict)``). pytest is imported only when the function is called.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..names import normalize_name

__all__ = ["PATHS_ENV", "Check", "parametrize_with_checks"]

PATHS_ENV = "RLLM_PLUGINS_CHECK_PATHS"
"""Comma-separated groups of paths to check (``core``, ``trl``, ``verl``, ``verl_v1``), or ``none``; overrides ``paths=``."""


@dataclass(frozen=True)
class Check:
    """One item: ``check()`` runs one rule (or one cell) for one name, and fails, skips or returns."""

    name: str
    kind: str  # "contract" (an estimator's rule), "transform" (a transform's rule), "paths" (a matrix cell or group)
    rule: str  # the rule as the report prints it; for a cell "<path>-<relation>"; for a group not installed, the group
    run: Callable[[], None] = field(repr=False, compare=False)

    @property
    def key(self) -> str:
        """The rule in an item id and in ``expected_failures``: ``no mutation`` -> ``no_mutation``."""
        return _key(self.rule)

    @property
    def id(self) -> str:
        return f"{self.name}-{self.key}"

    def __call__(self) -> None:
        self.run()


def _key(rule: str) -> str:
    return re.sub(r"[^\w+.-]+", "_", rule).strip("_")


class _Once:
    """Each report computed once (on the first item that reads it); an exception is raised again by every reader."""

    def __init__(self) -> None:
        self.done: dict[Any, tuple[bool, Any]] = {}

    def __call__(self, key: Any, compute: Callable[[], Any]) -> Any:
        if key not in self.done:
            try:
                self.done[key] = (True, compute())
            except Exception as e:
                self.done[key] = (False, e)
        ok, value = self.done[key]
        if not ok:
            raise value
        return value


def _selected_groups(paths: bool | Iterable[str]) -> list[str]:
    from .matrix.paths import path_groups

    known = ["core", *path_groups()]
    env = os.environ.get(PATHS_ENV)
    if env is not None:
        paths = [] if env.strip().lower() == "none" else [g.strip() for g in env.split(",") if g.strip()]
    if paths is True:
        return known
    if paths is False:
        return []
    chosen = list(paths)  # type: ignore[arg-type]
    unknown = [g for g in chosen if g not in known]
    if unknown:
        where = f"{PATHS_ENV}={env}" if env is not None else "paths="
        raise ValueError(f"parametrize_with_checks: {where} names no group of paths: {', '.join(unknown)} (the groups: {', '.join(known)}, or none)")
    return [g for g in known if g in chosen]


def _every_group(groups: list[str]) -> bool:
    from .matrix.paths import path_groups

    return set(groups) == {"core", *path_groups()}


def _contract_checks(name: str, options: Mapping[str, Any] | None, seed: int, once: _Once) -> list[Check]:
    import pytest

    from ..registry import get_estimator
    from .rules import RULES
    from .runner import check_estimator

    spec = get_estimator(name).spec
    if spec.level == "step":
        from .step_contract import STEP_RULES

        rules = {rule: text for rule, (text, _) in STEP_RULES.items()}
    else:
        rules = dict(RULES)
        if spec.stateful:
            from .state_contract import STATE_RULES

            rules.update(STATE_RULES)

    def run(rule: str) -> None:
        report = once(("contract", name), lambda: check_estimator(name, seed=seed, options=options))
        status, reason = report.verdict(rule)
        if status == "pass":
            return
        if status == "skipped":
            pytest.skip(f"estimator {name!r}, rule {rule}: {reason}")
        found = [str(v) for v in report.violations if v.rule == rule]
        detail = "\n".join(found) if found else f"the contract check reported {status!r} for this rule"
        pytest.fail(f"estimator {name!r} breaks the rule {rule}: {rules[rule]}\n{detail}\n(the whole report: rllm-plugins check {name})", pytrace=False)

    return [Check(name, "contract", rule, lambda rule=rule: run(rule)) for rule in rules]


def _transform_checks(name: str, options: Mapping[str, Any] | None, seed: int, once: _Once) -> list[Check]:
    import pytest

    from ..transforms.contract import RULES, check_transform, transform_rules
    from ..transforms.registry import get_transform

    def run(rule: str) -> None:
        report = once(("transform", name), lambda: check_transform(name, options, seed=seed))
        results = {r: (ok, detail) for r, ok, detail in report.results}
        if rule not in results:
            pytest.fail(f"advantage transform {name!r}: the check reported nothing for the rule {rule}", pytrace=False)
        ok, detail = results[rule]
        if not ok:
            message = f"advantage transform {name!r} breaks the rule {rule}: {RULES[rule]}\n{detail}\n(the whole report: rllm-plugins check {name})"
            pytest.fail(message, pytrace=False)

    return [Check(name, "transform", rule, lambda rule=rule: run(rule)) for rule in transform_rules(get_transform(name).spec)]


def _path_checks(name: str, options: Mapping[str, Any] | None, seed: int, groups: list[str], once: _Once) -> list[Check]:
    import pytest

    from .matrix.estimators import entry_of
    from .matrix.paths import Call, core_paths, group_paths, with_twins
    from .matrix.relations import FAST, RELATIONS
    from .matrix.run import run_matrix

    entry = entry_of(name)
    if options is not None:
        from types import MappingProxyType

        entry = replace(entry, options=MappingProxyType(dict(options)))
    budget = replace(FAST, seeds=(seed,))
    descriptions = {r.name: r.description for r in RELATIONS}
    checks: list[Check] = []

    def skipped(group: str, reason: str) -> Check:
        return Check(name, "paths", group, lambda: pytest.skip(f"the {group} paths of the conformance matrix are not checked: {reason}"))

    def run(path: Any, relation: str) -> None:
        cells = once(("paths", name, path.name), lambda: {c.relation: c for c in run_matrix([entry], [path], budget)})
        cell = cells[relation]
        if cell.status in ("PASS", "declared"):  # declared: the spec's breaks say it breaks the relation on purpose, and it does
            return
        if cell.status == "n.a.":
            pytest.skip(f"{path.name} x {relation}: {cell.message}")
        if cell.status == "known":
            pytest.xfail(cell.message)
        pytest.fail(
            f"estimator {name!r} on {path.name} ({path.description}) breaks the relation {relation}: {descriptions[relation]}\n"
            f"{cell.message}\n(seed {seed}; the whole table: rllm-plugins check {name} --paths --seed {seed})",
            pytrace=False,
        )

    for group in groups:
        if group == "core":
            paths = core_paths()
        else:
            contributed = group_paths(group)
            if isinstance(contributed, str):
                checks.append(skipped(group, contributed))
                continue
            paths = with_twins(contributed)
        for path in paths:
            if path.not_applicable(Call(entry.name, entry.options)):
                continue  # a path that does not take this estimator at all (a step-level one on an outcome-only path)
            for relation in descriptions:
                checks.append(Check(name, "paths", f"{path.name}-{relation}", lambda path=path, relation=relation: run(path, relation)))
    return checks


def parametrize_with_checks(
    names: str | Iterable[str],
    *,
    expected_failures: Mapping[str, Mapping[str, str]] | None = None,
    paths: bool | Iterable[str] = True,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    seed: int = 0,
) -> Any:
    """A ``pytest.mark.parametrize("check", ...)`` decorator: one item per check of each of ``names``.

    ``names``: registered estimator or advantage transform names (a plugin's own). ``expected_failures``: name ->
    {rule: reason} for checks that fail on purpose (a rule as the report prints it or as in the item id; a cell as
    ``<path>-<relation>``): strict xfails. ``paths``: the estimators' conformance cells on every installed path
    (``True``), none (``False``) or the groups named (``"core"``, ``"trl"``, ``"verl"``, ``"verl_v1"``); the
    environment variable ``RLLM_PLUGINS_CHECK_PATHS`` (the same names, comma-separated, or ``none``) overrides it.
    ``options``: name -> options for every call (as ``rllm-plugins check --options``). ``seed``: the synthetic inputs.
    An unknown name, or an expected failure that names no check of its name, is a ``ValueError`` at collection.
    """
    import pytest

    from ..registry import available_estimators
    from ..transforms.registry import available_transforms

    chosen = [names] if isinstance(names, str) else list(names)
    estimators, transforms = set(available_estimators()), set(available_transforms())
    groups = _selected_groups(paths)
    once = _Once()
    every_path = True  # every group of paths collected (none skipped or left out)
    checks: list[Check] = []
    for raw in chosen:
        name = normalize_name(raw)
        name_options = (options or {}).get(raw, (options or {}).get(name))
        if name not in estimators and name not in transforms:
            from ..registry import get_estimator

            get_estimator(name)  # raises the registry's error: unknown (with the closest names), a plugin that failed to load, a conflict
        if name in estimators:
            checks += _contract_checks(name, name_options, seed, once)
            if groups:
                checks += _path_checks(name, name_options, seed, groups, once)
            every_path = every_path and _every_group(groups) and not any(c.kind == "paths" and "-" not in c.rule for c in checks)
        if name in transforms:
            checks += _transform_checks(name, name_options, seed, once)
    expected = {normalize_name(n): {_key(rule): reason for rule, reason in rules.items()} for n, rules in (expected_failures or {}).items()}
    _refuse_unknown_expectations(expected, checks, every_path)
    params = []
    for check in checks:
        reason = expected.get(check.name, {}).get(check.key)
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason is not None else []
        params.append(pytest.param(check, id=check.id, marks=marks))
    return pytest.mark.parametrize("check", params)


def _refuse_unknown_expectations(expected: Mapping[str, Mapping[str, str]], checks: list[Check], every_path: bool) -> None:
    """An expected failure must name a check of its name; while some group of paths is not collected (its framework
    missing, or not selected), a cell ``<path>-<relation>`` of a path not collected is accepted when the relation is the matrix's."""
    from .matrix.relations import RELATIONS

    relations = [r.name for r in RELATIONS]
    for name, rules in expected.items():
        mine = [c for c in checks if c.name == name]
        if not mine:
            raise ValueError(f"parametrize_with_checks: expected_failures names {name!r}, which is not among the names checked")
        keys = {c.key for c in mine}
        collected = {c.key.rsplit("-", 1)[0] for c in mine if c.kind == "paths"}
        for rule in rules:
            path, _, relation = rule.rpartition("-")
            if rule in keys or (not every_path and path and relation in relations and path not in collected):
                continue
            shown = ", ".join(sorted(c.key for c in mine if c.kind != "paths"))
            raise ValueError(
                f"parametrize_with_checks: expected_failures[{name!r}] names {rule!r}, which is no check of {name!r} "
                f"(its rules: {shown}; a cell: <path>-<relation>, as in the item ids)"
            )
