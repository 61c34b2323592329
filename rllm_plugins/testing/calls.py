"""Calling the estimator under test the way the collector and the adapters do, and reading what it returns.

A :class:`Case` is the synthetic input (per-group rewards and response lengths). :func:`call_list`
and :func:`call_batched` return the output as float64 arrays or raise a :class:`NoOutputError`
saying why there is none (the estimator raised, or returned something malformed).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import AlgorithmConfig
from ..options import spec_options
from ..registry import get_estimator, prepare_adv_estimator_input
from ..segments import offsets_from_sizes
from ..spec import AdvEstimatorSpec, batched_form_of, call_with_accepted_kwargs
from ..types import Step, Trajectory, TrajectoryGroup

__all__ = [
    "BadGroupError",
    "Case",
    "NoOutputError",
    "NotAPairError",
    "Output",
    "RaisedError",
    "Subject",
    "call_batched",
    "call_list",
    "first_difference",
    "list_inputs",
    "non_finite",
    "accepted_trials",
    "option_trials",
    "permutation",
    "short",
    "subject_of",
]


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


class NoOutputError(Exception):
    """No output to check a rule on: the estimator raised or returned a malformed result (another rule reports it)."""


class RaisedError(NoOutputError):
    """The estimator raised on valid input."""


class NotAPairError(NoOutputError):
    """The result is not two sequences with one entry per group."""


class BadGroupError(NoOutputError):
    """Some group's entry is not numeric or has the wrong number of values."""


@dataclass(frozen=True)
class Subject:
    """The estimator under test: a label for the report and both calling forms."""

    label: str
    list_form: Callable[..., Any]
    batched_form: Callable[..., Any]
    group_order_invariant: bool
    level: str = "outcome"
    needs_anchors: bool = False  # a step-level estimator reads anchor states (else it is called without them)
    stateful: bool = False  # forms take ``state`` and return (result, new_state): see .state_contract
    options: Mapping[str, Any] = field(default_factory=dict)  # option name -> default (inspect.Parameter.empty: none)
    check_options: Callable[[Mapping[str, Any]], object] | None = None  # the spec's range / choice check
    needs_values: bool = False  # a value-based step-level estimator: called with a value per step, its batched form returns (advantages, returns)
    insensitive: tuple[str, ...] = ()  # options the spec declares change nothing on synthetic inputs (breaks["option_sensitivity:NAME"])


@dataclass(frozen=True)
class Output:
    """The list form's result, one float64 array per group."""

    advantages: list[np.ndarray]
    returns: list[np.ndarray]


def subject_of(name_or_fn: Any) -> Subject:
    """A registered name, an :class:`AdvEstimatorSpec` or a list-form function, as a :class:`Subject`."""
    if callable(name_or_fn) and not isinstance(name_or_fn, AdvEstimatorSpec):
        label = getattr(name_or_fn, "__qualname__", repr(name_or_fn))
        return Subject(label, name_or_fn, batched_form_of(name_or_fn), True)
    if isinstance(name_or_fn, AdvEstimatorSpec):
        spec, label, forms = name_or_fn, repr(name_or_fn.name), (name_or_fn.list_form, name_or_fn.batched_form)
    else:
        estimator = get_estimator(name_or_fn)
        spec, label, forms = estimator.spec, f"{estimator.spec.name!r} ({estimator.provider})", (estimator.list_form, estimator.batched_form)
    options = dict(spec_options(spec).defaults)
    insensitive = tuple(key.partition(":")[2] for key in spec.breaks if key.startswith("option_sensitivity:"))
    return Subject(
        label, *forms, spec.group_order_invariant, spec.level, spec.needs_anchors, spec.stateful, options, spec.check_options, spec.needs_values, insensitive
    )


def _traj_groups(case: Case) -> list[TrajectoryGroup]:
    return [
        TrajectoryGroup(
            [Trajectory(steps=[Step(response_ids=[0] * n)], reward=r) for r, n in zip(rewards, lengths, strict=True)],
            group_id=f"task{g}:checked",
        )
        for g, (rewards, lengths) in enumerate(zip(case.rewards, case.lengths, strict=True))
    ]


def list_inputs(case: Case) -> dict[str, Any]:
    """The keyword arguments the collector passes to the list form for ``case``."""
    rewards = [np.array(g, dtype=np.float64) for g in case.rewards]
    return prepare_adv_estimator_input(rewards, AlgorithmConfig(), _traj_groups(case))


def call_list(subject: Subject, case: Case, inputs: dict[str, Any] | None = None) -> Output:
    """Call the list form like the collector does and check the shape of what comes back."""
    inputs = list_inputs(case) if inputs is None else inputs
    try:
        result = call_with_accepted_kwargs(subject.list_form, **inputs)
    except Exception as e:
        raise RaisedError(f"raised {type(e).__name__}: {e}") from e
    return _parse(result, case)


def _parse(result: Any, case: Case) -> Output:
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise NotAPairError(f"returned {type(result).__name__} {short(result)}, not a pair (advantages_by_group, returns_by_group)")
    parts = []
    for what, seq in zip(("advantages_by_group", "returns_by_group"), result, strict=True):
        if isinstance(seq, (str, bytes)) or not hasattr(seq, "__len__") or not hasattr(seq, "__getitem__"):
            raise NotAPairError(f"{what} is {type(seq).__name__} {short(seq)}, not a sequence with one entry per group")
        if len(seq) != len(case.rewards):
            raise NotAPairError(f"{what} has {len(seq)} entries for {len(case.rewards)} groups")
        arrays = []
        for g, (values, size) in enumerate(zip(seq, case.sizes, strict=True)):
            if size != 1 and np.ndim(values) == 0:
                raise NotAPairError(f"{what}[{g}] is the single value {short(values)} for a group of {size}: was only one sequence returned?")
            try:
                arr = np.asarray(values, dtype=np.float64).reshape(-1)
            except (TypeError, ValueError) as e:
                raise BadGroupError(f"{what}[{g}] is not numeric: {short(values)} ({e})") from None
            if arr.size != size:
                raise BadGroupError(f"{what}[{g}] has {arr.size} values for a group of {size} trajectories")
            arrays.append(arr)
        parts.append(arrays)
    return Output(*parts)


def call_batched(
    subject: Subject, case: Case, values: np.ndarray | None = None, offsets: np.ndarray | None = None, lengths: np.ndarray | None = None
) -> np.ndarray:
    """Call the batched form like the adapters do (flat float64 rewards, offsets, response lengths)."""
    values = np.array([r for g in case.rewards for r in g], dtype=np.float64) if values is None else values
    offsets = offsets_from_sizes(case.sizes) if offsets is None else offsets
    lengths = np.array([n for g in case.lengths for n in g], dtype=np.float64) if lengths is None else lengths
    try:
        out = subject.batched_form(values, offsets, lengths=lengths, norm_adv_by_std_in_grpo=True)
        out = np.asarray(out, dtype=np.float64)
    except Exception as e:
        raise RaisedError(f"batched form raised {type(e).__name__}: {e}") from e
    if out.shape != values.shape:
        raise BadGroupError(f"batched form returned shape {out.shape} for {values.size} rewards")
    return out


def short(obj: Any, limit: int = 80) -> str:
    """``repr(obj)``, cut to ``limit`` characters."""
    text = repr(obj)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def first_difference(got: list[np.ndarray], want: list[np.ndarray], tol: float, exact: bool = False) -> str | None:
    """``None`` if the per-group arrays agree (to ``tol`` relative to the largest magnitude), else where they first differ."""
    scale = max([1.0] + [float(np.max(np.abs(w[np.isfinite(w)]))) for w in want if np.isfinite(w).any()])
    for g, (a, b) in enumerate(zip(got, want, strict=True)):
        same = np.array_equal(a, b, equal_nan=True) if exact else np.allclose(a, b, rtol=tol, atol=tol * scale, equal_nan=True)
        if not same:
            t = int(np.flatnonzero(~np.isclose(a, b, rtol=0 if exact else tol, atol=0 if exact else tol * scale, equal_nan=True))[0])
            return f"group {g}, trajectory {t}: {a[t]!r} vs {b[t]!r}"
    return None


def non_finite(output: Output) -> str | None:
    """``None`` if every advantage and return is finite, else the first that is not."""
    for what, arrays in (("advantage", output.advantages), ("return", output.returns)):
        for g, arr in enumerate(arrays):
            bad = np.flatnonzero(~np.isfinite(arr))
            if bad.size:
                return f"group {g}, trajectory {int(bad[0])}: {what} is {arr[bad[0]]} for finite rewards"
    return None


def permutation(rng_key: Sequence[int], n: int) -> np.ndarray:
    """A permutation of ``n`` items that moves something when ``n > 1`` (deterministic in ``rng_key``)."""
    perm = np.random.default_rng(list(rng_key)).permutation(n)
    return np.roll(perm, 1) if n > 1 and np.array_equal(perm, np.arange(n)) else perm


def option_trials(default: Any) -> list[Any]:
    """Values other than ``default`` to try for an option (its type's; none for a str, whose choices are unknown)."""
    if isinstance(default, (bool, np.bool_)):
        return [not default]
    if isinstance(default, (int, np.integer)):
        return [v for v in (int(default) + 1, 0, 1) if v != default]
    if isinstance(default, (float, np.floating)):
        return [v for v in (float(default) / 2 if default else 0.5, 0.0, float(default) + 1.0, 0.9) if v != default]
    if default is inspect.Parameter.empty:  # declared in AdvEstimatorSpec.options without a default: try numbers
        return [0.5, 0.0, 2.0]
    return []


def accepted_trials(name: str, default: Any, check_options: Any) -> list[Any]:
    """:func:`option_trials` of ``default`` that the estimator's ``check_options`` (None: none) accepts for option ``name``."""
    accepted = []
    for value in option_trials(default):
        try:
            if check_options is not None:
                check_options({name: value})
        except ValueError:
            continue
        accepted.append(value)
    return accepted
