"""The contract of a step-level estimator (``AdvEstimatorSpec(level="step")``), checked on synthetic task groups.

Cases mix groups of one, trajectories of one step, all-equal returns, extreme magnitudes and
anchor states that repeat across trajectories and across groups. The estimator is called as the
collector and the adapters call it: anchor states arrive as anchor-group ids
(:func:`~rllm_plugins.steps.forms.anchor_id_lists`), and only when its spec says ``needs_anchors=True``; a value-based
estimator (``needs_values=True``) gets a critic's value of every step, ``0.5 * r + 0.25`` of the step's reward ``r``
(so values move with their steps when a case is permuted or shrunk).
Each rule returns ``None`` (it holds) or a message; :func:`check_step_rules` runs them all and shrinks
each counterexample (:mod:`.step_shrinker`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from dataclasses import replace as replace_subject
from typing import Any

import numpy as np

from ..calling import call_with_accepted_kwargs
from ..needs import Needs
from ..outputs import as_advantages
from ..steps.batch import StepBatch
from ..steps.forms import anchor_id_lists, batch_from_lists, split_step_output
from .calls import accepted_trials, option_trials
from .step_shrinker import shrink_step_case

__all__ = ["STEP_RULES", "StepCase", "bind_needs", "check_step_rules", "option_trials", "step_cases"]

TOL = 1e-6


@dataclass(frozen=True)
class StepCase:
    """Per group, per trajectory: outcome, step rewards and anchor states (tuples, so a case is immutable)."""

    outcomes: tuple[tuple[float, ...], ...]
    step_rewards: tuple[tuple[tuple[float, ...], ...], ...]
    anchors: tuple[tuple[tuple[str, ...], ...], ...]

    def batch(self, *, with_anchors: bool = True, relabel: bool = False, with_values: bool = False) -> StepBatch:
        """The case as the collector hands it on: a :class:`StepBatch` (``relabel``: the same anchor groups under other ids;
        ``with_values``: each step's value, ``0.5 * reward + 0.25``)."""
        rewards = [np.array(g, dtype=np.float64) for g in self.outcomes]
        step_rewards = [[np.array(t, dtype=np.float64) for t in g] for g in self.step_rewards]
        values = [[0.5 * t + 0.25 for t in g] for g in step_rewards] if with_values else None
        batch = batch_from_lists(rewards, step_rewards, [[list(t) for t in g] for g in self.anchors] if with_anchors else None, values)
        if relabel and batch.anchors is not None and batch.anchors.size:
            anchors = int(batch.anchors.max()) - batch.anchors
            return StepBatch(batch.outcomes, batch.traj_offsets, batch.step_rewards, batch.step_offsets, anchors, step_values=batch.step_values)
        return batch

    def inputs(self, *, with_anchors: bool = True, relabel: bool = False, with_values: bool = False) -> dict[str, Any]:
        """The list form's keyword arguments, as :func:`~rllm_plugins.steps.forms.step_batched_form_of` passes them (anchor-group ids)."""
        batch = self.batch(with_anchors=with_anchors, relabel=relabel, with_values=with_values)
        bounds = zip(self._bounds[:-1], self._bounds[1:], strict=True)
        inputs = {
            "rewards": batch.trajectories.split(batch.outcomes),
            "step_rewards": [list(batch.steps.split(batch.step_rewards)[a:b]) for a, b in bounds],
            "anchor_states": anchor_id_lists(batch),
        }
        if batch.step_values is not None:
            inputs["step_values"] = [list(batch.steps.split(batch.step_values)[a:b]) for a, b in zip(self._bounds[:-1], self._bounds[1:], strict=True)]
        return inputs

    @property
    def _bounds(self) -> list[int]:
        return [0, *np.cumsum([len(g) for g in self.outcomes]).tolist()]

    @property
    def num_trajectories(self) -> int:
        return sum(len(g) for g in self.outcomes)

    def permuted(self, group_order: Sequence[int], trajectory_orders: Sequence[Sequence[int]]) -> StepCase:
        """Groups in ``group_order``; group ``g``'s trajectories (of the original group) in ``trajectory_orders[g]``."""
        parts = []
        for part in (self.outcomes, self.step_rewards, self.anchors):
            parts.append(tuple(tuple(part[g][i] for i in trajectory_orders[g]) for g in group_order))
        return StepCase(*parts)

    def __str__(self) -> str:
        rewards = [[list(t) for t in g] for g in self.step_rewards]
        return f"outcomes={[list(g) for g in self.outcomes]}, step_rewards={rewards}, anchors={[[list(t) for t in g] for g in self.anchors]}"


def step_cases(seed: int) -> list[StepCase]:
    """Synthetic task groups: varied, groups of one, one-step trajectories, all-equal returns, extreme magnitudes, none."""
    rng = np.random.default_rng(seed)

    def case(sizes: list[int], max_steps: int, draw: Callable[[int], np.ndarray]) -> StepCase:
        outcomes, rewards, anchors = [], [], []
        for g, n in enumerate(sizes):
            lengths = rng.integers(1, max_steps + 1, n)
            outcomes.append(tuple(float(x) for x in draw(n)))
            rewards.append(tuple(tuple(float(x) for x in draw(int(t))) for t in lengths))
            anchors.append(tuple(tuple(f"s{int(rng.integers(0, 3))}" if t else f"task{g}" for t in range(int(k))) for k in lengths))
        return StepCase(tuple(outcomes), tuple(rewards), tuple(anchors))

    def extreme(n: int) -> np.ndarray:
        return rng.choice([-1.0, 1.0], n) * rng.choice([1e30, 1e-30, 1.0], n)

    def constant(n: int) -> np.ndarray:
        return np.full(n, 2.0)

    return [
        case([3, 4], 4, lambda n: rng.normal(size=n)),
        case([4, 4, 2], 5, lambda n: rng.integers(0, 2, n).astype(float)),
        case([1, 3, 1], 3, lambda n: rng.normal(size=n)),
        case([4, 2], 1, lambda n: rng.normal(size=n)),
        case([3, 3], 4, constant),
        case([3, 4], 3, extreme),
        case([5], 6, lambda n: rng.normal(0.0, 10.0, n)),
        StepCase((), (), ()),
    ]


def _flat(nested: Any) -> np.ndarray:
    return np.concatenate([as_advantages(t, "estimator") for g in nested for t in g]) if len(nested) else np.zeros(0)


def _batched(spec: Any, case: StepCase, *, relabel: bool = False, **options: Any) -> np.ndarray:
    batch = case.batch(with_anchors=spec.needs_anchors, relabel=relabel, with_values=spec.needs_values)
    result = call_with_accepted_kwargs(spec.batched_form, batch, norm_adv_by_std_in_grpo=True, **options)
    return split_step_output(result, spec.needs_values, batch.num_steps, "the batched form")[0]


def _listed(spec: Any, case: StepCase, *, relabel: bool = False) -> np.ndarray:
    inputs = case.inputs(with_anchors=spec.needs_anchors, relabel=relabel, with_values=spec.needs_values)
    result = call_with_accepted_kwargs(spec.list_form, **inputs, norm_adv_by_std_in_grpo=True)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ValueError(f"the list form returned {type(result).__name__}, not (advantages_by_group, returns_by_group)")
    advantages = result[0]
    if len(advantages) != len(case.outcomes) or any(len(a) != len(g) for a, g in zip(advantages, case.outcomes, strict=True)):
        raise ValueError("the list form's advantages are not [group][trajectory] like its input")
    for a_g, r_g in zip(advantages, case.step_rewards, strict=True):
        for a, r in zip(a_g, r_g, strict=True):
            if as_advantages(a, "the list form").size != len(r):
                raise ValueError("the list form's advantages do not have one value per step")
    return _flat(advantages)


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    return bool(np.allclose(got, want, rtol=TOL, atol=TOL * scale))


def _moving_permutation(rng: np.random.Generator, n: int) -> list[int]:
    """A permutation of ``n`` items that moves something when ``n > 1``."""
    order = rng.permutation(n)
    return (np.roll(order, 1) if n > 1 and np.array_equal(order, np.arange(n)) else order).tolist()


def _per_trajectory(flat: np.ndarray, case: StepCase) -> list[list[np.ndarray]]:
    """``(S,)`` advantages of ``case`` as ``[group][trajectory]`` arrays."""
    bounds = np.cumsum([0] + [len(t) for g in case.step_rewards for t in g])
    out, k = [], 0
    for g in case.step_rewards:
        out.append([flat[bounds[k + i] : bounds[k + i + 1]] for i in range(len(g))])
        k += len(g)
    return out


def _reordered(spec: Any, case: StepCase, group_order: list[int], trajectory_orders: list[list[int]]) -> str | None:
    """None if reordering groups and trajectories reorders the advantages the same way, else where they differ."""
    got = _listed(spec, case.permuted(group_order, trajectory_orders))
    per = _per_trajectory(_listed(spec, case), case)
    want = [per[g][i] for g in group_order for i in trajectory_orders[g]]
    return None if _close(got, np.concatenate(want) if want else np.zeros(0)) else "advantages changed"


def valid_output(spec: Any, case: StepCase, seed: int) -> str | None:
    out = _batched(spec, case)
    return None if np.isfinite(out).all() else f"non-finite advantage {out[~np.isfinite(out)][0]}"


def list_output(spec: Any, case: StepCase, seed: int) -> str | None:
    _listed(spec, case)
    return None


def forms_agree(spec: Any, case: StepCase, seed: int) -> str | None:
    a, b = _listed(spec, case), _batched(spec, case)
    return None if _close(a, b) else f"list form {a.tolist()} != batched form {b.tolist()}"


def deterministic(spec: Any, case: StepCase, seed: int) -> str | None:
    return None if np.array_equal(_batched(spec, case), _batched(spec, case)) else "two calls on the same input differ"


def trajectory_order(spec: Any, case: StepCase, seed: int) -> str | None:
    """Permuting (and reversing) the trajectories of every group permutes their advantages the same way."""
    rng = np.random.default_rng(seed)
    keep = list(range(len(case.outcomes)))
    for orders in ([_moving_permutation(rng, len(g)) for g in case.outcomes], [list(reversed(range(len(g)))) for g in case.outcomes]):
        if _reordered(spec, case, keep, orders):
            return f"reordering a group's trajectories as {orders} changed their advantages, not only their order"
    return None


def group_order(spec: Any, case: StepCase, seed: int) -> str | None:
    """Permuting whole task groups permutes the advantages the same way."""
    order = _moving_permutation(np.random.default_rng(seed + 1), len(case.outcomes))
    if _reordered(spec, case, order, [list(range(len(g))) for g in case.outcomes]):
        return f"putting the task groups in the order {order} changed their advantages, not only their order"
    return None


def anchor_ids_are_labels(spec: Any, case: StepCase, seed: int) -> str | None:
    """The same anchor groups under other ids give the same advantages (ids are labels, not numbers)."""
    if not _close(_batched(spec, case, relabel=True), _batched(spec, case)):
        return "the batched form's advantages changed when the anchor groups were given other ids"
    if not _close(_listed(spec, case, relabel=True), _listed(spec, case)):
        return "the list form's advantages changed when the anchor groups were given other ids"
    return None


def no_mutation(spec: Any, case: StepCase, seed: int) -> str | None:
    inputs = case.inputs(with_anchors=spec.needs_anchors, with_values=spec.needs_values)
    before = copy.deepcopy(inputs)
    call_with_accepted_kwargs(spec.list_form, **inputs, norm_adv_by_std_in_grpo=True)
    same = all(np.array_equal(a, b) for a, b in zip(inputs["rewards"], before["rewards"], strict=True)) and all(
        np.array_equal(a, b) for g, h in zip(inputs["step_rewards"], before["step_rewards"], strict=True) for a, b in zip(g, h, strict=True)
    )
    return None if same and inputs["anchor_states"] == before["anchor_states"] else "the estimator changed its inputs"


def empty_input(spec: Any, case: StepCase, seed: int) -> str | None:
    anchors = [] if spec.needs_anchors else None
    values = {"step_values": []} if spec.needs_values else {}
    result = call_with_accepted_kwargs(spec.list_form, rewards=[], step_rewards=[], anchor_states=anchors, **values, norm_adv_by_std_in_grpo=True)
    return None if [list(r) for r in result] == [[], []] else f"empty input gave {result!r}, not ([], [])"


def options_matter(spec: Any, cases: list[StepCase]) -> tuple[str | None, StepCase | None]:
    """Every option the spec declares can change the output: some value it accepts changes some case's advantages."""
    for name, default in spec.options.items():
        if name in spec.insensitive:  # declared: it changes nothing on synthetic inputs
            continue
        trials = accepted_trials(name, default, spec.check_options)
        if not trials:
            continue
        changed = False
        for case in cases:
            try:
                base = _batched(spec, case)
                changed = any(not np.array_equal(_batched(spec, case, **{name: value}), base) for value in trials)
            except Exception:  # a value the estimator refuses (or another rule's failure) changes nothing here
                continue
            if changed:
                break
        if not changed:
            return (
                f"option {name!r} never changed the output (tried {trials} against the default {default!r} on {len(cases)} cases); "
                "an estimator that ignores an option misleads its users: read it, or leave it out of the signature and AdvEstimatorSpec.options"
            ), next(iter(cases), None)
    return None, None


STEP_RULES: dict[str, tuple[str, Callable[[Any, StepCase, int], str | None]]] = {
    "valid_output": ("the batched form returns one finite real advantage per step", valid_output),
    "list_output": ("the list form returns (advantages, returns), [group][trajectory], one value per step", list_output),
    "forms_agree": ("list and batched forms agree to 1e-6", forms_agree),
    "deterministic": ("the same input gives the same advantages", deterministic),
    "trajectory_order": ("permuting a group's trajectories permutes their advantages the same way", trajectory_order),
    "group_order": ("permuting whole task groups permutes the advantages the same way", group_order),
    "anchor_ids_are_labels": ("the same anchor groups under other ids give the same advantages", anchor_ids_are_labels),
    "options_matter": ("each option the estimator declares can change its output", lambda spec, case, seed: None),
    "no_mutation": ("the inputs are left unchanged", no_mutation),
    "empty_input": ("no groups gives ([], [])", empty_input),
}


_COMPARES = frozenset({"trajectory_order", "group_order", "anchor_ids_are_labels", "options_matter"})  # compare two calls' outputs


def _skip_reason(name: str, spec: Any, verdicts: dict[str, str]) -> str | None:
    if name in _COMPARES and verdicts.get("deterministic") == "FAIL":
        return "not deterministic"
    if name == "anchor_ids_are_labels" and not spec.needs_anchors:
        return "the estimator reads no anchor states (needs_anchors=False)"
    if name in ("group_order", "trajectory_order") and spec.stateful and not spec.group_order_invariant:
        return "stateful with group_order_invariant=False (the scan order of trajectories matters)"
    if name == "group_order" and not spec.group_order_invariant:
        return "declared group_order_invariant=False"
    if name == "options_matter" and not any(option_trials(d) for d in spec.options.values()):
        return "no option with values to try (str options are not tried)"
    return None


def check_step_rules(spec: Any, seed: int) -> tuple[dict[str, str], list[tuple[str, str, StepCase]]]:
    """Verdict per rule (``pass`` / ``FAIL``) and the violations ``(rule, message, shrunk case)``; never raises for a misbehaving estimator."""
    verdicts: dict[str, str] = {}
    violations: list[tuple[str, str, StepCase]] = []
    cases = step_cases(seed)
    for name, (_, check) in STEP_RULES.items():
        reason = _skip_reason(name, spec, verdicts)
        if reason:
            verdicts[name] = f"skipped: {reason}"
            continue
        verdicts[name] = "pass"
        if name == "options_matter":
            message, example = options_matter(spec, [c for c in cases if c.outcomes][:4])
            if message and example is not None:
                violations.append((name, message, example))
                verdicts[name] = "FAIL"
            continue
        for case in cases if name != "empty_input" else cases[-1:]:
            if not case.outcomes and name not in ("empty_input", "list_output", "no_mutation"):
                continue
            message = judge(check, spec, case, seed)
            if message:
                if case.outcomes:
                    case, message = shrink_step_case(lambda c, check=check: judge(check, spec, c, seed), case, message)
                violations.append((name, message, case))
                verdicts[name] = "FAIL"
                break
    return verdicts, violations


def judge(check: Callable[[Any, StepCase, int], str | None], spec: Any, case: StepCase, seed: int) -> str | None:
    """The rule's message on ``case`` (an exception the estimator raises is one), or None."""
    try:
        return check(spec, case, seed)
    except Exception as e:
        return f"raised {type(e).__name__}: {e}"


def bind_needs(subject: Any, needs: Needs) -> Any:
    """``subject`` called as the paths call it when its options make it read more (:func:`rllm_plugins.needs.needs_of`, say
    ``composite`` of ``gigpo``, ``opo`` or ``rae``): with anchor states, with each trajectory's length (``2 * steps + 1``, so it
    moves with its trajectory), and from a fresh state (as on a run's first step; task ids ``task<g>``), the new state dropped.
    """
    batched, listed = subject.batched_form, subject.list_form

    def batched_form(batch: StepBatch, /, **kwargs: Any) -> Any:
        if needs.lengths:
            batch = replace(batch, lengths=2.0 * np.diff(batch.step_offsets) + 1.0)
        if needs.state:
            tasks = np.array([f"task{g}" for g in batch.trajectories.group_index.tolist()], dtype=object)
            return batched(batch, state={}, task_ids=tasks, **kwargs)[0]
        return batched(batch, **kwargs)

    def list_form(rewards: Any, step_rewards: Any, anchor_states: Any = None, **kwargs: Any) -> Any:
        if needs.lengths:
            kwargs["lengths"] = [2.0 * len(t) + 1.0 for g in step_rewards for t in g]
        if needs.state:
            tasks = np.array([f"task{g}" for g, group in enumerate(rewards) for _ in group], dtype=object)
            return listed(rewards, step_rewards, anchor_states, state={}, task_ids=tasks, **kwargs)[0]
        return listed(rewards, step_rewards, anchor_states, **kwargs)

    return replace_subject(
        subject,
        needs_anchors=subject.needs_anchors or needs.anchors,
        stateful=needs.state,
        group_order_invariant=subject.group_order_invariant and not needs.state,  # a running baseline scans in order
        batched_form=batched_form,
        list_form=list_form,
    )
