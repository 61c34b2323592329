"""Contract checker for advantage estimators: :func:`check_estimator` and :func:`assert_estimator_contract`.

An estimator (a registered name, an :class:`AdvEstimatorSpec` or a plain list-form function) is
called on synthetic groups built from ``seed`` and checked against every rule in :data:`RULES`.
A rule that fails is reported with the smallest failing example found by shrinking (fewer
groups, fewer trajectories, simpler rewards). Plugin authors call it from their own tests::

    from rllm_plugins.testing import assert_estimator_contract

    def test_my_estimator_keeps_the_contract():
        assert_estimator_contract("my_estimator")
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .config import AlgorithmConfig
from .registry import _prepare_adv_estimator_input, get_estimator
from .segments import offsets_from_sizes
from .spec import AdvEstimatorSpec, batched_form_of, call_with_accepted_kwargs
from .types import Step, Trajectory, TrajectoryGroup

__all__ = ["RULES", "Case", "ContractReport", "Violation", "assert_estimator_contract", "check_estimator"]

RULES: dict[str, str] = {
    "returns_pair": "returns (advantages_by_group, returns_by_group), both aligned with the groups",
    "group_lengths": "one numeric value per trajectory in every group",
    "finite": "finite advantages for finite rewards (magnitudes 1e-30 .. 1e30)",
    "deterministic": "the same input gives the same output",
    "permutation_equivariant": "permuting a group's trajectories permutes its advantages the same way",
    "group_order_invariant": "permuting whole groups permutes the output the same way",
    "no_mutation": "rewards, lengths and trajectory groups are left unchanged",
    "group_of_one": "groups of a single trajectory give a valid, finite output",
    "single_group": "a single group gives a valid, finite output",
    "empty_input": "rewards=[] gives two empty sequences",
    "forms_agree": "the list form and the batched form agree to 1e-6",
}

COMPARE_TOL = 1e-9  # relative to the output's magnitude: reordered sums differ in the last bits
FORMS_TOL = 1e-6
MAX_SHRINK_CALLS = 300


@dataclass(frozen=True)
class Case:
    """Synthetic input: per-group rewards and response lengths (same shapes)."""

    rewards: tuple[tuple[float, ...], ...]
    lengths: tuple[tuple[int, ...], ...]

    @property
    def sizes(self) -> list[int]:
        return [len(g) for g in self.rewards]

    def as_dict(self) -> dict[str, list[list[float]] | list[list[int]]]:
        return {"rewards": [list(g) for g in self.rewards], "lengths": [list(g) for g in self.lengths]}

    def __str__(self) -> str:
        return f"rewards={[list(g) for g in self.rewards]}, lengths={[list(g) for g in self.lengths]}"


@dataclass(frozen=True)
class Violation:
    """One broken rule, with the smallest failing input found."""

    rule: str
    message: str
    example: Case

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}\n    minimal failing example: {self.example}"


@dataclass
class ContractReport:
    """Verdict of every rule (``pass``, ``FAIL`` or ``skipped: why``) and the violations."""

    estimator: str
    verdicts: dict[str, str] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def __str__(self) -> str:
        width = max(map(len, RULES))
        lines = [f"contract of estimator {self.estimator}: {'OK' if self.ok else f'{len(self.violations)} violation(s)'}"]
        lines += [f"  {rule:<{width}}  {self.verdicts.get(rule, 'not run'):<8}  {RULES[rule]}" for rule in RULES]
        lines += [str(v) for v in self.violations]
        return "\n".join(lines)


class _NoOutputError(Exception):
    """No output to check a rule on: the estimator raised or returned a malformed result (another rule reports it)."""


class _RaisedError(_NoOutputError):
    """The estimator raised on valid input."""


class _NotAPairError(_NoOutputError):
    """The result is not two sequences with one entry per group."""


class _BadGroupError(_NoOutputError):
    """Some group's entry is not numeric or has the wrong number of values."""


@dataclass(frozen=True)
class _Subject:
    label: str
    list_form: Callable[..., Any]
    batched_form: Callable[..., Any]
    group_order_invariant: bool


@dataclass(frozen=True)
class _Output:
    advantages: list[np.ndarray]
    returns: list[np.ndarray]


def _subject(name_or_fn: Any) -> _Subject:
    if isinstance(name_or_fn, AdvEstimatorSpec):
        spec = name_or_fn
        return _Subject(repr(spec.name), spec.list_form, spec.batched_form, spec.group_order_invariant)
    if callable(name_or_fn):
        label = getattr(name_or_fn, "__qualname__", repr(name_or_fn))
        return _Subject(label, name_or_fn, batched_form_of(name_or_fn), True)
    estimator = get_estimator(name_or_fn)
    spec = estimator.spec
    return _Subject(f"{spec.name!r} ({estimator.provider})", estimator.list_form, estimator.batched_form, spec.group_order_invariant)


# --- calling the estimator -------------------------------------------------------------------


def _traj_groups(case: Case) -> list[TrajectoryGroup]:
    return [
        TrajectoryGroup(
            [Trajectory(steps=[Step(response_ids=[0] * n)], reward=r) for r, n in zip(rewards, lengths, strict=True)],
            group_id=f"task{g}:checked",
        )
        for g, (rewards, lengths) in enumerate(zip(case.rewards, case.lengths, strict=True))
    ]


def _list_inputs(case: Case) -> dict[str, Any]:
    rewards = [np.array(g, dtype=np.float64) for g in case.rewards]
    return _prepare_adv_estimator_input(rewards, AlgorithmConfig(), _traj_groups(case))


def _call_list(subject: _Subject, case: Case, inputs: dict[str, Any] | None = None) -> _Output:
    """Call the list form like the collector does and check the shape of what comes back."""
    inputs = _list_inputs(case) if inputs is None else inputs
    try:
        result = call_with_accepted_kwargs(subject.list_form, **inputs)
    except Exception as e:
        raise _RaisedError(f"raised {type(e).__name__}: {e}") from e
    return _parse(result, case)


def _parse(result: Any, case: Case) -> _Output:
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise _NotAPairError(f"returned {type(result).__name__} {_short(result)}, not a pair (advantages_by_group, returns_by_group)")
    parts = []
    for what, seq in zip(("advantages_by_group", "returns_by_group"), result, strict=True):
        if isinstance(seq, (str, bytes)) or not hasattr(seq, "__len__") or not hasattr(seq, "__getitem__"):
            raise _NotAPairError(f"{what} is {type(seq).__name__} {_short(seq)}, not a sequence with one entry per group")
        if len(seq) != len(case.rewards):
            raise _NotAPairError(f"{what} has {len(seq)} entries for {len(case.rewards)} groups")
        arrays = []
        for g, (values, size) in enumerate(zip(seq, case.sizes, strict=True)):
            if size != 1 and np.ndim(values) == 0:
                raise _NotAPairError(f"{what}[{g}] is the single value {_short(values)} for a group of {size}: was only one sequence returned?")
            try:
                arr = np.asarray(values, dtype=np.float64).reshape(-1)
            except (TypeError, ValueError) as e:
                raise _BadGroupError(f"{what}[{g}] is not numeric: {_short(values)} ({e})") from None
            if arr.size != size:
                raise _BadGroupError(f"{what}[{g}] has {arr.size} values for a group of {size} trajectories")
            arrays.append(arr)
        parts.append(arrays)
    return _Output(*parts)


def _call_batched(
    subject: _Subject, case: Case, values: np.ndarray | None = None, offsets: np.ndarray | None = None, lengths: np.ndarray | None = None
) -> np.ndarray:
    """Call the batched form like the adapters do (flat float64 rewards, offsets, response lengths)."""
    values = np.array([r for g in case.rewards for r in g], dtype=np.float64) if values is None else values
    offsets = offsets_from_sizes(case.sizes) if offsets is None else offsets
    lengths = np.array([n for g in case.lengths for n in g], dtype=np.float64) if lengths is None else lengths
    try:
        out = subject.batched_form(values, offsets, lengths=lengths, norm_adv_by_std_in_grpo=True)
        out = np.asarray(out, dtype=np.float64)
    except Exception as e:
        raise _RaisedError(f"batched form raised {type(e).__name__}: {e}") from e
    if out.shape != values.shape:
        raise _BadGroupError(f"batched form returned shape {out.shape} for {values.size} rewards")
    return out


def _short(obj: Any, limit: int = 80) -> str:
    text = repr(obj)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- comparisons -----------------------------------------------------------------------------


def _first_difference(got: list[np.ndarray], want: list[np.ndarray], tol: float, exact: bool = False) -> str | None:
    """``None`` if the per-group arrays agree, else where they first differ."""
    scale = max([1.0] + [float(np.max(np.abs(w[np.isfinite(w)]))) for w in want if np.isfinite(w).any()])
    for g, (a, b) in enumerate(zip(got, want, strict=True)):
        same = np.array_equal(a, b, equal_nan=True) if exact else np.allclose(a, b, rtol=tol, atol=tol * scale, equal_nan=True)
        if not same:
            t = int(np.flatnonzero(~np.isclose(a, b, rtol=0 if exact else tol, atol=0 if exact else tol * scale, equal_nan=True))[0])
            return f"group {g}, trajectory {t}: {a[t]!r} vs {b[t]!r}"
    return None


def _non_finite(output: _Output) -> str | None:
    for what, arrays in (("advantage", output.advantages), ("return", output.returns)):
        for g, arr in enumerate(arrays):
            bad = np.flatnonzero(~np.isfinite(arr))
            if bad.size:
                return f"group {g}, trajectory {int(bad[0])}: {what} is {arr[bad[0]]} for finite rewards"
    return None


def _permutation(rng_key: Sequence[int], n: int) -> np.ndarray:
    """A permutation of ``n`` items that moves something when ``n > 1`` (deterministic in ``rng_key``)."""
    perm = np.random.default_rng(list(rng_key)).permutation(n)
    return np.roll(perm, 1) if n > 1 and np.array_equal(perm, np.arange(n)) else perm


# --- the rules: each returns None (holds), a message (broken), or raises _NoOutputError (does not apply) ---

_Check = Callable[[_Subject, Case, int], "str | None"]


def _valid_output(subject: _Subject, case: Case, seed: int) -> str | None:
    try:
        output = _call_list(subject, case)
    except _NoOutputError as e:
        return str(e)
    return _non_finite(output)


def _check_returns_pair(subject: _Subject, case: Case, seed: int) -> str | None:
    try:
        _call_list(subject, case)
    except (_RaisedError, _NotAPairError) as e:
        return str(e)
    except _BadGroupError:
        return None  # the pair is aligned; group_lengths reports the rest
    return None


def _check_group_lengths(subject: _Subject, case: Case, seed: int) -> str | None:
    try:
        _call_list(subject, case)
    except _BadGroupError as e:
        return str(e)
    return None


def _check_finite(subject: _Subject, case: Case, seed: int) -> str | None:
    return _non_finite(_call_list(subject, case))


def _check_deterministic(subject: _Subject, case: Case, seed: int) -> str | None:
    first = _call_list(subject, case)
    try:
        second = _call_list(subject, case)
    except _NoOutputError as e:
        return f"the first call succeeded, the second on the same input failed: {e}"
    diff = _first_difference(second.advantages, first.advantages, 0.0, exact=True)
    diff = diff or _first_difference(second.returns, first.returns, 0.0, exact=True)
    return None if diff is None else f"two calls on the same input differ at {diff}"


def _check_permutation(subject: _Subject, case: Case, seed: int) -> str | None:
    if any(len(set(zip(r, n, strict=True))) < len(r) for r, n in zip(case.rewards, case.lengths, strict=True)):
        raise _NoOutputError("identical trajectories in a group may be told apart by position (tie-breaking)")
    perms = [_permutation((seed, g, len(r)), len(r)) for g, r in enumerate(case.rewards)]
    permuted = Case(
        tuple(tuple(r[i] for i in p) for r, p in zip(case.rewards, perms, strict=True)),
        tuple(tuple(n[i] for i in p) for n, p in zip(case.lengths, perms, strict=True)),
    )
    base, moved = _call_list(subject, case), _call_list(subject, permuted)
    want = [a[p] for a, p in zip(base.advantages, perms, strict=True)]
    diff = _first_difference(moved.advantages, want, COMPARE_TOL)
    if diff is None:
        return None
    return f"permuting the trajectories of each group by {[p.tolist() for p in perms]} did not permute the advantages the same way: {diff}"


def _check_group_order(subject: _Subject, case: Case, seed: int) -> str | None:
    perm = _permutation((seed, len(case.rewards)), len(case.rewards))
    permuted = Case(tuple(case.rewards[i] for i in perm), tuple(case.lengths[i] for i in perm))
    base, moved = _call_list(subject, case), _call_list(subject, permuted)
    diff = _first_difference(moved.advantages, [base.advantages[i] for i in perm], COMPARE_TOL)
    if diff is None:
        return None
    return (
        f"reordering the groups by {perm.tolist()} changed their advantages: {diff}; "
        "if the estimator depends on group order, declare AdvEstimatorSpec(group_order_invariant=False)"
    )


def _trajectory_snapshot(groups: list[TrajectoryGroup]) -> list[Any]:
    return [[(t.reward, [(list(s.response_ids), copy.deepcopy(s.advantage)) for s in t.steps]) for t in g.trajectories] for g in groups]


def _check_no_mutation(subject: _Subject, case: Case, seed: int) -> str | None:
    inputs = _list_inputs(case)
    rewards, groups = inputs["rewards"], inputs["traj_groups"]
    kept_list, kept, kept_groups = list(rewards), [r.copy() for r in rewards], _trajectory_snapshot(groups)
    _call_list(subject, case, inputs)
    if len(rewards) != len(kept) or any(a is not b for a, b in zip(rewards, kept_list, strict=False)):
        return "the list form replaced entries of its `rewards` list"
    for g, (now, before) in enumerate(zip(rewards, kept, strict=True)):
        if not np.array_equal(now, before):
            return f"the list form changed rewards[{g}] from {before.tolist()} to {now.tolist()}"
    if _trajectory_snapshot(groups) != kept_groups:
        return "the list form changed `traj_groups` (a trajectory's reward, response_ids or a step's advantage)"
    values = np.array([r for g in case.rewards for r in g], dtype=np.float64)
    lengths = np.array([n for g in case.lengths for n in g], dtype=np.float64)
    offsets = offsets_from_sizes(case.sizes)
    arrays = (values, offsets, lengths)
    kept_arrays = tuple(a.copy() for a in arrays)
    _call_batched(subject, case, values, offsets, lengths)
    for what, now, before in zip(("values", "offsets", "lengths"), arrays, kept_arrays, strict=True):
        if not np.array_equal(now, before):
            return f"the batched form changed its `{what}` argument from {_short(before.tolist())} to {_short(now.tolist())}"
    return None


def _check_empty_input(subject: _Subject, case: Case, seed: int) -> str | None:
    try:
        output = _call_list(subject, case)
    except _NoOutputError as e:
        return f"on rewards=[]: {e}"
    return None if not output.advantages and not output.returns else "on rewards=[]: returned non-empty output"


def _check_forms_agree(subject: _Subject, case: Case, seed: int) -> str | None:
    listed = _call_list(subject, case)
    try:
        batched = _call_batched(subject, case)
    except _NoOutputError as e:
        return str(e)
    flat = np.concatenate(listed.advantages) if listed.advantages else np.zeros(0)
    diff = _first_difference([batched], [flat], FORMS_TOL)
    return None if diff is None else f"batched form vs list form (flat index) at {diff}"


# --- case generation and shrinking -----------------------------------------------------------


def _general(case: Case) -> bool:
    return len(case.rewards) >= 2 and min(case.sizes) >= 2


def _has_group_of_one(case: Case) -> bool:
    return 1 in case.sizes


def _one_group(case: Case) -> bool:
    return case.sizes != [] and len(case.rewards) == 1 and case.sizes[0] >= 2


def _empty(case: Case) -> bool:
    return not case.rewards


_RULE_CHECKS: dict[str, tuple[_Check, Callable[[Case], bool]]] = {
    "returns_pair": (_check_returns_pair, _general),
    "group_lengths": (_check_group_lengths, _general),
    "finite": (_check_finite, _general),
    "deterministic": (_check_deterministic, _general),
    "permutation_equivariant": (_check_permutation, _general),
    "group_order_invariant": (_check_group_order, _general),
    "no_mutation": (_check_no_mutation, _general),
    "group_of_one": (_valid_output, _has_group_of_one),
    "single_group": (_valid_output, _one_group),
    "empty_input": (_check_empty_input, _empty),
    "forms_agree": (_check_forms_agree, lambda case: _general(case) or _has_group_of_one(case) or _one_group(case)),
}


_COMPARING_RULES = frozenset({"permutation_equivariant", "group_order_invariant", "forms_agree"})  # compare two calls' outputs


def _cases(seed: int) -> list[Case]:
    """Synthetic inputs: binary, continuous, constant, extreme-magnitude rewards; groups of one; one group; none."""
    rng = np.random.default_rng(seed)

    def case(sizes: Sequence[int], draw: Callable[[int], np.ndarray]) -> Case:
        rewards = tuple(tuple(float(x) for x in draw(n)) for n in sizes)
        lengths = tuple(tuple(int(x) for x in rng.integers(1, 50, n)) for n in sizes)
        return Case(rewards, lengths)

    def extreme(n: int) -> np.ndarray:
        return rng.choice([-1.0, 1.0], n) * rng.choice([1e30, 1e-30, 1.0, 1e15], n) * rng.uniform(0.5, 1.5, n)

    def constant(n: int) -> np.ndarray:
        return np.full(n, float(rng.integers(-3, 4)))

    sizes = [rng.integers(2, 9, rng.integers(2, 6)).tolist() for _ in range(3)]
    return [
        case([2, 3], lambda n: rng.normal(size=n)),
        *(case(s, lambda n: rng.integers(0, 2, n).astype(float)) for s in sizes),
        *(case(s, lambda n: rng.normal(0.0, 10.0, n)) for s in sizes),
        case([4, 4, 4, 4], lambda n: rng.normal(size=n)),
        case([3, 5], constant),
        case([4, 3, 6], extreme),
        case([1, 1, 1], lambda n: rng.normal(size=n)),
        case([1, 4, 1, 3], lambda n: rng.integers(0, 2, n).astype(float)),
        case([1], lambda n: rng.normal(size=n)),
        case([6], lambda n: rng.normal(size=n)),
        case([5], lambda n: rng.integers(0, 2, n).astype(float)),
        Case((), ()),
    ]


def _replaced(items: tuple[Any, ...], i: int, item: Any) -> tuple[Any, ...]:
    return (*items[:i], item, *items[i + 1 :])


def _dropped(items: tuple[Any, ...], i: int) -> tuple[Any, ...]:
    return (*items[:i], *items[i + 1 :])


def _complexity(value: float) -> tuple[int, float]:
    """Order of simplicity for rewards: 0, 1, -1, other integers (smaller first), anything else."""
    for rank, simple in enumerate((0.0, 1.0, -1.0)):
        if value == simple:
            return rank, 0.0
    return (3, abs(value)) if float(value).is_integer() else (4, 0.0)


def _smaller(case: Case) -> Iterator[Case]:
    """Candidate simplifications of ``case``, most aggressive first."""
    rewards, lengths = case.rewards, case.lengths
    for g in range(len(rewards)):
        yield Case(_dropped(rewards, g), _dropped(lengths, g))
    for g, group in enumerate(rewards):
        for t in range(len(group)):
            yield Case(_replaced(rewards, g, _dropped(group, t)), _replaced(lengths, g, _dropped(lengths[g], t)))
    for g, group in enumerate(rewards):
        for t, value in enumerate(group):
            for simpler in (0.0, 1.0, -1.0, float(round(value))):
                if _complexity(simpler) < _complexity(value):
                    yield Case(_replaced(rewards, g, _replaced(group, t, simpler)), lengths)
    for g, group in enumerate(lengths):
        for t, n in enumerate(group):
            if n != 1:
                yield Case(rewards, _replaced(lengths, g, _replaced(group, t, 1)))


_NOT_APPLICABLE = ""


def _run(check: _Check, subject: _Subject, case: Case, seed: int) -> str | None:
    """The rule's message on ``case``: non-empty if broken, ``None`` if it holds, ``_NOT_APPLICABLE`` (empty) otherwise."""
    try:
        return check(subject, case, seed) or None
    except _NoOutputError:
        return _NOT_APPLICABLE


def _shrink(check: _Check, applies: Callable[[Case], bool], subject: _Subject, case: Case, message: str, seed: int) -> tuple[Case, str]:
    """Greedily simplify a failing case while it still fails the same rule."""
    calls = 0
    progress = True
    while progress and calls < MAX_SHRINK_CALLS:
        progress = False
        for candidate in _smaller(case):
            if not applies(candidate):
                continue
            calls += 1
            found = _run(check, subject, candidate, seed)
            if found:
                case, message, progress = candidate, found, True
                break
            if calls >= MAX_SHRINK_CALLS:
                break
    return case, message


# --- public API ------------------------------------------------------------------------------


def check_estimator(name_or_fn: Any, *, seed: int = 0) -> ContractReport:
    """Check an estimator against every contract rule; never raises for a misbehaving estimator.

    ``name_or_fn`` is a registered name (str or ``rLLMAdvantageEstimator``), an
    :class:`AdvEstimatorSpec`, or a list-form function ``fn(rewards, **kw) -> (advantages, returns)``.
    ``seed`` picks the synthetic inputs. Unknown names raise ``ValueError`` from the registry.
    """
    subject = _subject(name_or_fn)
    report = ContractReport(subject.label)
    cases = _cases(seed)
    for rule, (check, applies) in _RULE_CHECKS.items():
        if rule == "group_order_invariant" and not subject.group_order_invariant:
            report.verdicts[rule] = "skipped: declared group_order_invariant=False"
            continue
        if rule in _COMPARING_RULES and report.verdicts.get("deterministic") == "FAIL":
            report.verdicts[rule] = "skipped: not deterministic"
            continue
        applicable = 0
        for case in filter(applies, cases):
            message = _run(check, subject, case, seed)
            applicable += message != _NOT_APPLICABLE
            if message:
                example, message = _shrink(check, applies, subject, case, message, seed)
                report.violations.append(Violation(rule, message, example))
                report.verdicts[rule] = "FAIL"
                break
        else:
            report.verdicts[rule] = "pass" if applicable else "skipped: no usable output (see the other rules)"
    return report


def assert_estimator_contract(name_or_fn: Any, *, seed: int = 0) -> ContractReport:
    """Raise ``AssertionError`` with the report if the estimator breaks any contract rule; else return the report."""
    report = check_estimator(name_or_fn, seed=seed)
    if not report.ok:
        raise AssertionError(str(report))
    return report
