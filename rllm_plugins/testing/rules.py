"""The contract rules, one function each: it returns ``None`` (the rule holds), a message (it is broken), or raises
:class:`~.calls.NoOutputError` (it cannot be judged on this case; another rule reports why).

Each rule is declared with :func:`rule`: its name, one line saying what it demands, and which
synthetic cases it is judged on. :data:`RULES` maps every name to that line, in checking order.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..segments import offsets_from_sizes
from ..types import TrajectoryGroup
from .calls import (
    BadGroupError,
    Case,
    NoOutputError,
    NotAPairError,
    RaisedError,
    Subject,
    accepted_trials,
    call_batched,
    call_list,
    first_difference,
    list_inputs,
    non_finite,
    permutation,
    short,
)

__all__ = ["ALL_RULES", "COMPARE_TOL", "FORMS_TOL", "NOT_APPLICABLE", "RULES", "Rule", "rule"]

COMPARE_TOL = 1e-9  # relative to the output's magnitude: reordered sums differ in the last bits
FORMS_TOL = 1e-6

Check = Callable[[Subject, Case, int], "str | None"]
NOT_APPLICABLE = ""


@dataclass(frozen=True)
class Rule:
    """One contract rule: ``check(subject, case, seed)`` judged on the cases where ``applies(case)``.

    ``compares`` rules compare two calls' outputs (skipped when the estimator is not deterministic).
    """

    name: str
    description: str
    check: Check
    applies: Callable[[Case], bool]
    compares: bool = False

    def judge(self, subject: Subject, case: Case, seed: int) -> str | None:
        """The rule's message on ``case``: non-empty if broken, ``None`` if it holds, :data:`NOT_APPLICABLE` (empty) otherwise."""
        try:
            return self.check(subject, case, seed) or None
        except NoOutputError:
            return NOT_APPLICABLE


ALL_RULES: list[Rule] = []


def rule(name: str, description: str, applies: Callable[[Case], bool], *, compares: bool = False) -> Callable[[Check], Check]:
    """Declare the decorated function as the check of rule ``name`` (rules are checked in declaration order)."""

    def declare(check: Check) -> Check:
        ALL_RULES.append(Rule(name, description, check, applies, compares))
        return check

    return declare


# --- which cases a rule is judged on ---------------------------------------------------------


def general(case: Case) -> bool:
    """At least two groups, each of at least two trajectories."""
    return len(case.rewards) >= 2 and min(case.sizes) >= 2


def has_group_of_one(case: Case) -> bool:
    return 1 in case.sizes


def one_group(case: Case) -> bool:
    return case.sizes != [] and len(case.rewards) == 1 and case.sizes[0] >= 2


def empty(case: Case) -> bool:
    return not case.rewards


def has_empty_group(case: Case) -> bool:
    """An empty group among non-empty ones (GDPO's, where no member of a group has a reward key)."""
    return 0 in case.sizes and any(case.sizes)


def valid_output(subject: Subject, case: Case, seed: int) -> str | None:
    try:
        output = call_list(subject, case)
    except NoOutputError as e:
        return str(e)
    return non_finite(output)


# --- the rules -------------------------------------------------------------------------------


@rule("returns_pair", "returns (advantages_by_group, returns_by_group), both aligned with the groups", general)
def returns_pair(subject: Subject, case: Case, seed: int) -> str | None:
    try:
        call_list(subject, case)
    except (RaisedError, NotAPairError) as e:
        return str(e)
    except BadGroupError:
        return None  # the pair is aligned; group_lengths reports the rest
    return None


@rule("group_lengths", "one numeric value per trajectory in every group", general)
def group_lengths(subject: Subject, case: Case, seed: int) -> str | None:
    try:
        call_list(subject, case)
    except BadGroupError as e:
        return str(e)
    return None


@rule("finite", "finite advantages for finite rewards (magnitudes 1e-30 .. 1e30)", general)
def finite(subject: Subject, case: Case, seed: int) -> str | None:
    return non_finite(call_list(subject, case))


@rule("deterministic", "the same input gives the same output", general)
def deterministic(subject: Subject, case: Case, seed: int) -> str | None:
    first = call_list(subject, case)
    try:
        second = call_list(subject, case)
    except NoOutputError as e:
        return f"the first call succeeded, the second on the same input failed: {e}"
    diff = first_difference(second.advantages, first.advantages, 0.0, exact=True)
    diff = diff or first_difference(second.returns, first.returns, 0.0, exact=True)
    return None if diff is None else f"two calls on the same input differ at {diff}"


@rule("permutation_equivariant", "permuting a group's trajectories permutes its advantages the same way", general, compares=True)
def permutation_equivariant(subject: Subject, case: Case, seed: int) -> str | None:
    if any(len(set(zip(r, n, strict=True))) < len(r) for r, n in zip(case.rewards, case.lengths, strict=True)):
        raise NoOutputError("identical trajectories in a group may be told apart by position (tie-breaking)")
    perms = [permutation((seed, g, len(r)), len(r)) for g, r in enumerate(case.rewards)]
    permuted = Case(
        tuple(tuple(r[i] for i in p) for r, p in zip(case.rewards, perms, strict=True)),
        tuple(tuple(n[i] for i in p) for n, p in zip(case.lengths, perms, strict=True)),
    )
    base, moved = call_list(subject, case), call_list(subject, permuted)
    want = [a[p] for a, p in zip(base.advantages, perms, strict=True)]
    diff = first_difference(moved.advantages, want, COMPARE_TOL)
    if diff is None:
        return None
    return f"permuting the trajectories of each group by {[p.tolist() for p in perms]} did not permute the advantages the same way: {diff}"


@rule("group_order_invariant", "permuting whole groups permutes the output the same way", general, compares=True)
def group_order_invariant(subject: Subject, case: Case, seed: int) -> str | None:
    perm = permutation((seed, len(case.rewards)), len(case.rewards))
    permuted = Case(tuple(case.rewards[i] for i in perm), tuple(case.lengths[i] for i in perm))
    base, moved = call_list(subject, case), call_list(subject, permuted)
    diff = first_difference(moved.advantages, [base.advantages[i] for i in perm], COMPARE_TOL)
    if diff is None:
        return None
    return (
        f"reordering the groups by {perm.tolist()} changed their advantages: {diff}; "
        "if the estimator depends on group order, declare AdvEstimatorSpec(group_order_invariant=False)"
    )


def _trajectory_snapshot(groups: list[TrajectoryGroup]) -> list[Any]:
    return [[(t.reward, [(list(s.response_ids), copy.deepcopy(s.advantage)) for s in t.steps]) for t in g.trajectories] for g in groups]


@rule("no_mutation", "rewards, lengths and trajectory groups are left unchanged", general)
def no_mutation(subject: Subject, case: Case, seed: int) -> str | None:
    inputs = list_inputs(case)
    rewards, groups = inputs["rewards"], inputs["traj_groups"]
    kept_list, kept, kept_groups = list(rewards), [r.copy() for r in rewards], _trajectory_snapshot(groups)
    call_list(subject, case, inputs)
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
    call_batched(subject, case, values, offsets, lengths)
    for what, now, before in zip(("values", "offsets", "lengths"), arrays, kept_arrays, strict=True):
        if not np.array_equal(now, before):
            return f"the batched form changed its `{what}` argument from {short(before.tolist())} to {short(now.tolist())}"
    return None


rule("group_of_one", "groups of a single trajectory give a valid, finite output", has_group_of_one)(valid_output)
rule("single_group", "a single group gives a valid, finite output", one_group)(valid_output)


@rule("empty_input", "rewards=[] gives two empty sequences", empty)
def empty_input(subject: Subject, case: Case, seed: int) -> str | None:
    try:
        output = call_list(subject, case)
    except NoOutputError as e:
        return f"on rewards=[]: {e}"
    return None if not output.advantages and not output.returns else "on rewards=[]: returned non-empty output"


@rule("empty_group", "an empty group among non-empty ones gets no value and changes no other group's", has_empty_group, compares=True)
def empty_group(subject: Subject, case: Case, seed: int) -> str | None:
    try:
        output = call_list(subject, case)
    except NoOutputError as e:
        return f"with an empty group (normalize_then_sum hands one where no member has a reward key): {e}"
    if not subject.group_order_invariant:  # it may read where a group stands, and an empty group moves the others
        return non_finite(output)
    kept = [g for g, size in enumerate(case.sizes) if size]
    without = Case(tuple(case.rewards[g] for g in kept), tuple(case.lengths[g] for g in kept))
    base = call_list(subject, without)
    diff = first_difference([output.advantages[g] for g in kept], base.advantages, COMPARE_TOL)
    return None if diff is None else f"the empty group changed the other groups' advantages (groups numbered without it): {diff}"


@rule(
    "forms_agree",
    "the list form and the batched form agree to 1e-6",
    lambda case: general(case) or has_group_of_one(case) or one_group(case),
    compares=True,
)
def forms_agree(subject: Subject, case: Case, seed: int) -> str | None:
    listed = call_list(subject, case)
    try:
        batched = call_batched(subject, case)
    except NoOutputError as e:
        return str(e)
    flat = np.concatenate(listed.advantages) if listed.advantages else np.zeros(0)
    diff = first_difference([batched], [flat], FORMS_TOL)
    return None if diff is None else f"batched form vs list form (flat index) at {diff}"


def options_matter(subject: Subject, cases: list[Case]) -> tuple[str | None, Case | None]:
    """Every bool or numeric option of the estimator changes its output on some case, for some value its checks accept
    (options declared insensitive, ``breaks["option_sensitivity:NAME"]``, are left out)."""
    from functools import partial

    usable = [case for case in cases if general(case)]
    for name, default in subject.options.items():
        if name in subject.insensitive:
            continue
        trials = accepted_trials(name, default, subject.check_options)
        if not trials:
            continue
        changed = False
        for case, value in ((c, v) for c in usable for v in trials):
            try:
                base = call_list(subject, case)
                other = call_list(Subject(**{**subject.__dict__, "list_form": partial(subject.list_form, **{name: value})}), case)
            except NoOutputError:  # a value the estimator refuses (or another rule's failure) changes nothing here
                continue
            if first_difference(other.advantages, base.advantages, 0.0, exact=True) is not None:
                changed = True
                break
        if not changed:
            return (
                f"option {name!r} never changed the output (tried {trials} against the default {default!r} on {len(usable)} cases); an estimator "
                "that ignores an option misleads its users: read it, leave it out of the signature, or declare why: "
                f"AdvEstimatorSpec(breaks={{'option_sensitivity:{name}': ...}})"
            ), next(iter(usable), None)
    return None, None


OPTIONS_MATTER = "each bool or numeric option the estimator declares can change its output"
RULES: dict[str, str] = {**{r.name: r.description for r in ALL_RULES}, "options_matter": OPTIONS_MATTER}
