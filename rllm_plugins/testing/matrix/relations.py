"""The relations of the conformance matrix: what every (estimator, path) pair must satisfy, one function each.

A relation returns ``""`` when it holds, else a message naming the seed and where the first difference is;
:class:`NotApplicable` says why a pair has nothing to check. Tolerances follow the path's dtype.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ...options import spec_options
from ...registry import get_estimator
from ...state.schema import MapOf
from .estimators import EstimatorEntry
from .paths import COLLECTOR, Call, Output, Path, batched_returns
from .samples import Sample, groups_deranged

__all__ = ["FAST", "FULL", "PLACE_WORDS", "RELATIONS", "Budget", "NotApplicable", "Relation"]

PLACE_WORDS = ("group", "trajectory", "row", "uid", "role", "completion", "step", "turn", "key")
RTOL = {"float64": 1e-9, "float32": 2e-5}


class NotApplicable(Exception):  # noqa: N818 - a verdict, not an error
    """The pair has nothing to check for this relation (the reason is the message)."""


@dataclass(frozen=True)
class Budget:
    """How much of each relation runs: sample ``seeds``, reward ``scales`` (powers of 10), ``hostile`` option values
    (``hostile_slow`` on paths whose config check takes seconds, as ``verl-check``'s Hydra composition)."""

    seeds: tuple[int, ...]
    scales: tuple[int, ...]
    hostile: tuple[Any, ...]
    hostile_slow: tuple[Any, ...]


HOSTILE = (10**400, float("nan"), True, "1")
FAST = Budget(seeds=(0,), scales=(-300, -30, 30, 150, 300), hostile=HOSTILE, hostile_slow=())
FULL_HOSTILE = (*HOSTILE, float("inf"), float("-inf"))
FULL = Budget(seeds=tuple(range(6)), scales=tuple(range(-300, 301, 15)), hostile=FULL_HOSTILE, hostile_slow=FULL_HOSTILE)
BASE_SCALE = 10  # the scale relation compares against rewards x 1e10 (where an epsilon no longer matters)


def _call(entry: EstimatorEntry) -> Call:
    return Call(entry.name, entry.options)


def _run(path: Path, call: Call, sample: Sample, state: Any = None) -> Output | str:
    """The path's output, or ``"raised ValueError: ..."`` when it refuses (any other exception propagates: a finding)."""
    try:
        return path.run(call, sample, state)
    except ValueError as e:
        return f"raised ValueError: {e}"


def _tolerance(path: Path, scale: float) -> tuple[float, float]:
    rtol = RTOL.get(path.dtype, 1e-9)
    return rtol, rtol * max(scale, 1e-300)


def _difference(got: np.ndarray, want: np.ndarray, path: Path, what: str) -> str:
    if got.shape != want.shape:
        return f"{what}: {got.size} values for {want.size} steps"
    finite = np.abs(want[np.isfinite(want)])
    scale = float(finite.max()) if finite.size else 0.0
    rtol, atol = _tolerance(path, scale)
    bad = ~np.isclose(got, want, rtol=rtol, atol=atol)
    if not bad.any():
        return ""
    s = int(np.flatnonzero(bad)[0])
    return f"{what}: step {s} (flat) got {got[s]!r}, expected {want[s]!r}"


def _reference(entry: EstimatorEntry, sample: Sample) -> Output | str:
    return _run(COLLECTOR, _call(entry), sample)


def _refused(seed: int, sample: Sample, runs: Sequence[tuple[str, Output | str]]) -> str:
    """The verdict when a run refused the sample, else ``""``. A sample's group sizes are those the spec accepts, so a refusal
    is a finding, never agreement: a relation that held because every side refused would hold for an estimator that refuses
    everything."""
    for what, out in runs:
        if isinstance(out, str):
            sizes = sorted(len(g) for g in sample.groups)
            return f"seed {seed}: {what} refused a sample the spec accepts (group sizes {sizes}): {out}"
    return ""


def equals_collector(entry: EstimatorEntry, path: Path, budget: Budget) -> str:
    """The path gives the collector's advantages on the same trajectories (to its dtype's tolerance); neither refuses them.

    A path that gives a value-based estimator's returns (the critic's targets) gives those of the spec's batched form.
    A transformed twin (``path.base``) gives its reference of the untransformed path's own output instead.
    """
    if path.name == "collector":
        raise NotApplicable("the reference")
    reference = path.base or COLLECTOR
    for seed in budget.seeds:
        sample = entry.sample(seed)
        want, got = _run(reference, _call(entry), sample), _run(path, _call(entry), sample)
        refused = _refused(seed, sample, [(f"the {reference.name}", want), (path.name, got)])
        if refused:
            return refused
        assert not isinstance(want, str) and not isinstance(got, str)
        expected = path.reference(want.advantages, sample) if path.reference else want.advantages
        message = _difference(got.advantages, expected, path, f"seed {seed}")
        if not message and got.returns is not None:
            want_returns = batched_returns(_call(entry), sample)
            message = "" if want_returns is None else _difference(got.returns, want_returns, path, f"seed {seed}, returns")
        if message:
            return message
    return ""


PAD_ROWS = 3


def no_token_rows(entry: EstimatorEntry, path: Path, budget: Budget) -> str:
    """Rows without model tokens (padding) change nothing for the real rows, get 0, and leave the state as it was."""
    if path.pad is None:
        raise NotApplicable(f"{path.name} has no rows without model tokens")
    for seed in budget.seeds:
        sample = entry.sample(seed)
        base = _run(path, _call(entry), sample)
        try:
            padded: Output | str = path.pad(_call(entry), sample, PAD_ROWS)
        except ValueError as e:
            padded = f"raised ValueError: {e}"
        refused = _refused(seed, sample, [(f"{path.name} without padding", base), (f"{path.name} with {PAD_ROWS} padding rows", padded)])
        if refused:
            return refused
        assert not isinstance(base, str) and not isinstance(padded, str)
        message = _difference(padded.advantages, base.advantages, path, f"seed {seed}, real rows beside {PAD_ROWS} padding rows")
        if message:
            return message
        if padded.padding is not None and np.any(padded.padding != 0):
            return f"seed {seed}: padding rows got advantages {padded.padding.tolist()}, expected 0"
        if padded.state != base.state:
            return f"seed {seed}: padding rows changed the state: {padded.state} instead of {base.state}"
    return ""


def permutation(entry: EstimatorEntry, path: Path, budget: Budget) -> str:
    """Deranging the trajectories of each group (and the groups, where ``group_order_invariant``) permutes the advantages alike."""
    for seed in budget.seeds:
        sample = entry.sample(seed)
        shuffled, order = sample.permuted(np.random.default_rng(seed + 1000), groups=entry.spec.group_order_invariant)
        base, got = _run(path, _call(entry), sample), _run(path, _call(entry), shuffled)
        refused = _refused(seed, sample, [(f"{path.name} in order", base), (f"{path.name} shuffled", got)])
        if refused:
            return refused
        assert not isinstance(base, str) and not isinstance(got, str)
        message = _difference(got.advantages, base.advantages[order], path, f"seed {seed}, shuffled")
        if message:
            return message
    return ""


TERM_WEIGHTS = (0.25, -2.0)
SECOND_TERMS = ("grpo", "step_reinforce")  # the other term: the first the path takes


def composite_linear(entry: EstimatorEntry, path: Path, budget: Budget) -> str:
    """``composite([[e, a, opts], [f, b]])`` on the path is ``a * e + b * f`` on the same path (``f``: grpo, or step_reinforce on step-only paths)."""
    if entry.name == "composite":
        raise NotApplicable("composite is the wrapper itself")
    if get_estimator(entry.name).spec.needs_values:  # the refusal itself: tests/steps/test_composite_any_terms.py
        raise NotApplicable("composite refuses a value-based term: its returns are a critic's targets, which a sum of terms has not")
    if path.kind != "path":
        raise NotApplicable("composite runs on paths, not inside another wrapper")
    other = next((Call(name, {}) for name in SECOND_TERMS if path.not_applicable(Call(name, {})) is None), None)
    if other is None:
        raise NotApplicable(f"{path.name} takes none of {SECOND_TERMS} as the second term")
    composite = Call("composite", {"terms": [[entry.name, TERM_WEIGHTS[0], dict(entry.options)], [other.name, TERM_WEIGHTS[1]]]})
    reason = None if path.run_composite else path.not_applicable(composite)
    if reason:
        raise NotApplicable(reason)
    on_composite = replace(path, run=path.run_composite) if path.run_composite else path
    for seed in budget.seeds:
        sample = entry.sample(seed)
        alone, second, both = _run(path, _call(entry), sample), _run(path, other, sample), _run(on_composite, composite, sample)
        refused = _refused(seed, sample, [(f"{entry.name} alone", alone), (f"{other.name} alone", second), ("the composite", both)])
        if refused:
            return refused
        assert not isinstance(alone, str) and not isinstance(both, str) and not isinstance(second, str)
        expected = TERM_WEIGHTS[0] * alone.advantages + TERM_WEIGHTS[1] * second.advantages
        message = _difference(both.advantages, expected, path, f"seed {seed}, composite of weights {TERM_WEIGHTS}")
        if message:
            return message
    return ""


CALLS = 4


def state_roundtrip(entry: EstimatorEntry, path: Path, budget: Budget) -> str:
    """Saving the state (as JSON) after any call of a sequence and continuing from it equals the uninterrupted sequence."""
    if not entry.spec.stateful:
        raise NotApplicable("not stateful")
    if not path.keeps_state:
        raise NotApplicable(f"{path.name} keeps no state")
    for seed in budget.seeds:
        samples = [entry.sample(seed * CALLS + i) for i in range(CALLS)]
        straight, state = [], None
        for sample in samples:
            out = path.run(_call(entry), sample, state)
            straight.append(out.advantages)
            state = out.state
        for cut in range(1, CALLS):
            state = None
            for i, sample in enumerate(samples):
                if i == cut:
                    state = json.loads(json.dumps(state))
                out = path.run(_call(entry), sample, state)
                state = out.state
                if not np.array_equal(out.advantages, straight[i]):
                    return f"seed {seed}: state saved and restored before call {cut}: call {i} differs from the uninterrupted sequence"
    return ""


_TASK = re.compile(r"^(.*task)(\d+)$")


def _renamed(state: Any, group_order: np.ndarray) -> Any:
    """``state`` with every mapping key ``...task<p>`` renamed ``...task<group_order[p]>`` (the matrix's task ids follow group positions)."""
    if not isinstance(state, dict):
        return state
    out = {}
    for key, value in state.items():
        found = _TASK.match(key) if isinstance(key, str) else None
        if found and int(found[2]) < group_order.size:
            key = f"{found[1]}{int(group_order[int(found[2])]):0{len(found[2])}d}"
        out[key] = _renamed(value, group_order)
    return out


def state_order(entry: EstimatorEntry, path: Path, budget: Budget) -> str:
    """A state keyed by task (every key a ``MapOf`` in the spec's ``state_schema``) after a batch is the same for any order of its groups."""
    if not entry.spec.stateful:
        raise NotApplicable("not stateful")
    if not path.keeps_state:
        raise NotApplicable(f"{path.name} keeps no state")
    schema = entry.spec.state_schema
    if schema is None:
        raise NotApplicable("the spec declares no state_schema: whether its state is keyed by task is unknown")
    for seed in budget.seeds:
        sample = entry.sample(seed)
        moved, group_order = groups_deranged(sample, np.random.default_rng(seed + 2000))
        base, got = _run(path, _call(entry), sample), _run(path, _call(entry), moved)
        refused = _refused(seed, sample, [(f"{path.name} in order", base), (f"{path.name} with the groups deranged", got)])
        if refused:
            return refused
        assert not isinstance(base, str) and not isinstance(got, str)
        flat = [key for key in (base.state or {}) if not isinstance(schema.get(key), MapOf)]
        if flat:
            raise NotApplicable(f"with these options the state's {flat[0]!r} is one value for the whole role (scanned in order), not keyed by task")
        if json.dumps(_renamed(got.state, group_order), sort_keys=True) != json.dumps(base.state, sort_keys=True):
            return f"seed {seed}: the groups in the order {group_order.tolist()} left the state {_renamed(got.state, group_order)}, in order {base.state}"
    return ""


ALTERNATIVES_FLOAT = (0.5, 0.25, 0.9, 0.1, 2.0, 3.0)
ALTERNATIVES_INT = (1, 2, 3, 0, 4)


def _alternatives(value: Any) -> list[Any]:
    """Other values to try for an option now at ``value``: the other bool; nearby ints; halves, doubles and common floats."""
    if isinstance(value, (bool, np.bool_)):
        return [not value]
    if isinstance(value, numbers.Integral):
        return [v for v in dict.fromkeys([value + 1, value + 2, value - 1, *ALTERNATIVES_INT]) if v != value]
    if isinstance(value, numbers.Real):
        return [v for v in dict.fromkeys([value * 0.5, value * 2, value + 0.5, *ALTERNATIVES_FLOAT]) if v != value]
    return [*ALTERNATIVES_FLOAT, *ALTERNATIVES_INT]  # a numeric option that defaults to None


def _scalar_options(entry: EstimatorEntry) -> dict[str, Any]:
    """The options a relation can vary: bool and numeric ones (their sample value, else default; None for numeric ones without)."""
    defaults = spec_options(entry.spec).defaults
    out = {k: entry.options.get(k, v) for k, v in defaults.items() if isinstance(v, (bool, np.bool_, numbers.Real))}
    out.update({k: entry.options.get(k) for k in entry.numeric_options if k not in out})
    return out


def _changing_value(entry: EstimatorEntry, option: str, value: Any, sample: Sample, base: Output) -> tuple[Call, Output] | None:
    """The first other value of ``option`` the core's config step accepts that changes the collector's advantages on ``sample``."""
    for other in _alternatives(value):
        call = Call(entry.name, {**entry.options, option: other})
        try:
            COLLECTOR.configure(entry.name, dict(call.options))  # type: ignore[misc]
        except ValueError:
            continue
        want = _run(COLLECTOR, call, sample)
        if not isinstance(want, str) and (want.advantages.shape != base.advantages.shape or not np.array_equal(want.advantages, base.advantages)):
            return call, want
    return None


def option_sensitivity(entry: EstimatorEntry, path: Path, budget: Budget) -> str:
    """Each bool or numeric option changes the collector's output for some value the config accepts, and the path gives that output too."""
    options = {k: v for k, v in _scalar_options(entry).items() if f"option_sensitivity:{k}" not in entry.breaks}  # declared: no effect on samples
    if not options:
        raise NotApplicable("no bool or numeric option (or each declared to change nothing on the samples)")
    samples = {}
    for seed in budget.seeds:
        sample = entry.sample(seed)
        base = _reference(entry, sample)
        refused = _refused(seed, sample, [("the collector", base)])
        if refused:
            return refused
        assert not isinstance(base, str)
        samples[seed] = (sample, base)
    for option, value in options.items():
        found = next(((seed, hit) for seed, (sample, base) in samples.items() for hit in [_changing_value(entry, option, value, sample, base)] if hit), None)
        if found is None:
            return (
                f"seeds {list(budget.seeds)}: option {option!r} changes no advantage for any of {_alternatives(value)} (from {value!r}); an option "
                f"that is read changes the output on some sample: read it, or declare why not: AdvEstimatorSpec(breaks={{'option_sensitivity:{option}': ...}})"
            )
        if path.name == COLLECTOR.name:
            continue
        seed, (call, want) = found
        sample = samples[seed][0]
        got = _run(path, call, sample)
        runs: list[tuple[str, Output | str]] = [(f"{path.name} with {option}={call.options[option]!r}", got)]
        if path.base:  # a twin transforms its own path's output with that value
            runs.append((f"{path.base.name} with {option}={call.options[option]!r}", _run(path.base, call, sample)))
        refused = _refused(seed, sample, runs)
        if refused:
            return refused
        assert not isinstance(got, str)
        want = runs[-1][1] if path.base else want
        assert not isinstance(want, str)
        expected = path.reference(want.advantages, sample) if path.reference else want.advantages
        message = _difference(got.advantages, expected, path, f"seed {seed}, {option}={call.options[option]!r} (the collector's output changes with it)")
        if message:
            return message
    return ""


def _names_a_place(message: str) -> bool:
    return any(word in message for word in PLACE_WORDS)


def scale(entry: EstimatorEntry, path: Path, budget: Budget) -> str:
    """Rewards x 10^k give the advantages of rewards x 1e10, or those times 10^(k-10) (scale-equivariant), or a ValueError naming the place.

    For k < 10 (an epsilon may matter there) the advantages must be finite, or a ValueError naming the place. The sample
    itself (k = 0) must run: a refusal of every scale would hold vacuously.
    """
    for seed in budget.seeds:
        sample = entry.sample(seed)
        refused = _refused(seed, sample, [(f"{path.name} (rewards x 1)", _run(path, _call(entry), sample))])
        if refused:
            return refused
        if sample.max_abs_reward == 0:
            continue
        base_sample = sample.scaled(10.0**BASE_SCALE)
        base = _run(path, _call(entry), base_sample) if base_sample.max_abs_reward <= path.max_reward else "not representable"
        for k in budget.scales:
            factor = 10.0**k
            scaled = sample.scaled(factor)
            if scaled.max_abs_reward > path.max_reward or not math.isfinite(scaled.max_abs_reward):
                continue
            try:
                out = path.run(_call(entry), scaled, None)
            except ValueError as e:
                if not _names_a_place(str(e)):
                    return f"seed {seed}, rewards x 1e{k}: ValueError names no place ({', '.join(PLACE_WORDS)}): {e}"
                continue
            got = out.advantages
            if not np.isfinite(got).all():
                return f"seed {seed}, rewards x 1e{k}: non-finite advantage {got[~np.isfinite(got)][0]} without a ValueError"
            if k < BASE_SCALE or isinstance(base, str) or not path.scale_law:
                continue
            same = _difference(got, base.advantages, path, "")
            scaled_too = _difference(got, base.advantages * 10.0 ** (k - BASE_SCALE), path, "")
            if same and scaled_too:
                return f"seed {seed}, rewards x 1e{k}: advantages changed silently against rewards x 1e{BASE_SCALE}{same}"
    return ""


def hostile_options(entry: EstimatorEntry, path: Path, budget: Budget) -> str:
    """Every numeric option given as a huge int, NaN, inf, a bool or a str is a ``ValueError`` naming the option, at config time.

    The sample options themselves must pass the same config step first (a step that refuses everything proves nothing).
    """
    if path.configure is None:
        raise NotApplicable(f"{path.name} has no config time")
    if path.base is not None:  # the same config step as its path's, which that cell checks (verl-check takes seconds a value)
        raise NotApplicable(f"the estimator's options are checked at config time as on {path.base.name}, whose cell checks them")
    values = budget.hostile if path.fast_configure else budget.hostile_slow
    if not values:
        raise NotApplicable(f"{path.name}'s config check takes seconds: only in the full matrix (make conformance)")
    if not entry.numeric_options:
        raise NotApplicable("no numeric option")
    try:
        path.configure(entry.name, dict(entry.options))
    except Exception as e:  # the control: valid options are accepted
        return f"the sample options {dict(entry.options)} are refused at config time: {type(e).__name__}: {e}"
    for option in entry.numeric_options:
        for value in values:
            shown = "10**400" if isinstance(value, int) and not isinstance(value, bool) and value > 1e308 else repr(value)
            try:
                path.configure(entry.name, {**entry.options, option: value})
            except ValueError as e:
                if option not in str(e):
                    return f"{option}={shown}: the ValueError does not name the option: {e}"
                continue
            except Exception as e:  # any other exception is the finding
                return f"{option}={shown}: raised {type(e).__name__} instead of ValueError: {e}"
            return f"{option}={shown}: accepted at config time"
    return ""


@dataclass(frozen=True)
class Relation:
    """One relation: ``name``, what it demands, and ``check(entry, path, budget) -> "" | message``."""

    name: str
    check: Callable[[EstimatorEntry, Path, Budget], str]

    @property
    def description(self) -> str:
        return (self.check.__doc__ or "").strip().splitlines()[0]


RELATIONS: Sequence[Relation] = (
    Relation("equals_collector", equals_collector),
    Relation("no_token_rows", no_token_rows),
    Relation("permutation", permutation),
    Relation("composite_linear", composite_linear),
    Relation("state_roundtrip", state_roundtrip),
    Relation("state_order", state_order),
    Relation("scale", scale),
    Relation("hostile_options", hostile_options),
    Relation("option_sensitivity", option_sensitivity),
)
