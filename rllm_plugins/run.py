"""One estimator run on flat groups: the procedure every driver calls, at the outcome and at the step level.

The drivers (the collector, TRL's outcome and turn paths, verl's row, step and session paths) do the layout
work: their rows into flat groups (``values`` ``(N,)`` and ``offsets`` ``(G + 1,)``, or a
:class:`~rllm_plugins.steps.StepBatch`) and the advantages back into their rows. Everything between is here:

0. the reward shapers the driver hands over (:class:`~rllm_plugins.shaping.stage.Shapers`): their additive terms on each
   unit's reward (a trajectory's at the step level, on its last step), before the estimator sees it;
1. what the estimator reads beyond the rewards, asked once (:attr:`Call.needs`, :func:`.needs.needs_of`), so the
   driver gathers only that (anchor states, lengths, values) and the run hands over exactly that;
2. the call itself, with its state when it keeps one (:func:`.state.store.call_stateful`): the options are
   checked against those the state was made with, and the state is read from its owner;
3. the output read by the one rule (:func:`.outputs.as_advantages`) and checked for size and finiteness, each
   failure worded by the driver (:class:`Wording`), which alone knows what a flat position is;
4. the advantage transforms the driver hands over (:class:`~rllm_plugins.transforms.stage.Transforms`), applied to the checked advantages
   (:func:`rllm_plugins.transforms.apply_transforms`), each unit with its group, its trajectory and the driver's
   context (the token log-probs a token-level transform reads are the framework's: verl and TRL apply those
   themselves, :mod:`rllm_verl.compute.transforms`, :mod:`rllm_trl.transforms`);
5. a ``commit`` returned, not run: the driver calls it once its own later checks passed, so a call that raises
   anywhere leaves the kept state as it was.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from .calling import call_with_accepted_kwargs, takes_keyword
from .needs import Needs, needs_of
from .options import state_options
from .outputs import as_advantages, as_groups
from .provenance import changed_code, code_of, package_version
from .segments import offsets_from_sizes
from .state.store import call_stateful
from .steps.forms import split_step_output

if TYPE_CHECKING:
    from .shaping.stage import Shapers
    from .spec import Estimator
    from .state.store import EstimatorState
    from .steps.batch import StepBatch
    from .transforms.stage import Transforms

__all__ = ["Call", "Commit", "Wording", "run_outcome", "run_outcome_listed", "run_steps"]

Commit = Callable[[], None]


@dataclass(frozen=True)
class Call:
    """One resolved estimator as a driver runs it: the ``options`` it is called with and ``who`` it is in errors.

    ``needs`` is computed here, once, from ``options``: the driver reads it to gather what the estimator reads.
    ``options`` are also what a stateful estimator's state is recorded and checked with
    (:func:`.options.state_options`). ``accepted_only``: a form gets only the keywords it names (the collector
    hands every estimator the config's ``estimator_kwargs`` and rLLM's context); otherwise it gets every one (the
    adapters checked their options against the estimator when their config was built).
    """

    estimator: Estimator
    options: Mapping[str, Any]
    who: str
    accepted_only: bool = False
    needs: Needs = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "needs", needs_of(self.estimator.spec, self.options))


@dataclass(frozen=True)
class Wording:
    """How a driver words a failed output check (only it knows what a flat position is: a row, a completion, a turn).

    ``size``: what the expected count counts (``"{who} returned 3 advantages for 4 {size}"``), or the whole message
    ``size(given, expected)``. ``not_finite(values, what)``: the message for ``values`` flat in the estimator's order,
    at least one not finite, ``what`` ``"advantage"`` or ``"return"``. ``who`` (default the call's) names the estimator
    in these messages and when its output is not advantages at all.
    """

    size: str | Callable[[int, int], str]
    not_finite: Callable[[np.ndarray, str], str]
    who: str | None = None

    def wrong_size(self, call: Call, given: int, expected: int) -> str:
        if callable(self.size):
            return self.size(given, expected)
        return f"{self.who or call.who} returned {given} advantages for {expected} {self.size}"


def _nothing() -> None:
    """The commit of a call that keeps no state."""


def _form(call: Call, form: Callable[..., Any]) -> Callable[..., Any]:
    """One of the estimator's forms as ``call`` passes keywords to it."""
    # a stateful step-level call (a composite's stateful term) passes only what the form names, on every path
    if call.accepted_only or (call.needs.state and call.estimator.spec.level == "step"):
        return functools.partial(call_with_accepted_kwargs, form)
    return form


def _invoke(
    call: Call,
    form: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    state: EstimatorState | None,
    role: str,
) -> tuple[Any, Commit]:
    """``form(*args, **kwargs)``, with the state of ``(estimator, role)`` when it keeps one; ``(result, commit)``.

    ``state`` None: a stateful estimator starts from nothing and its new state is dropped. The options are checked
    against those the state was made with, and the commit records them; so is the code that runs
    (:func:`.provenance.code_of` the estimator, with the rllm-plugins version): a loaded state made by other code (another
    version of its plugin) gives a ``RuntimeWarning`` naming both, once per load.
    """
    spec = call.estimator.spec
    if not call.needs.state:
        return form(*args, **kwargs), _nothing
    recorded = state_options(spec, call.options)
    code = {**code_of(call.estimator.provider), "rllm_plugins": package_version()}
    if state is not None:
        state.check_options(spec.name, recorded)
        loaded = state.loaded_code(spec.name)
        message = None if loaded is None else changed_code(spec.name, loaded[0], code, loaded[1])
        if message is not None:
            import warnings

            warnings.warn(f"rllm-plugins: {message}", RuntimeWarning, stacklevel=3)
    current = state.get(spec.name, role, spec.state_schema) if state is not None else {}
    result, new_state = call_stateful(form, current, call.who, *args, schema=spec.state_schema, **kwargs)
    if state is None:
        return result, _nothing
    return result, lambda: state.commit({(spec.name, role): new_state}, {spec.name: recorded}, {spec.name: code})


def _checked(call: Call, advantages: np.ndarray, expected: int, wording: Wording) -> np.ndarray:
    if advantages.size != expected:
        raise ValueError(wording.wrong_size(call, advantages.size, expected))
    if not np.isfinite(advantages).all():
        raise ValueError(wording.not_finite(advantages, "advantage"))
    return advantages


def _by_groups(call: Call, result: Any, offsets: np.ndarray, wording: Callable[[int], Wording]) -> np.ndarray:
    """A list form's ``(advantages_by_group, returns_by_group)`` as flat advantages, checked group by group."""
    who = call.who
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ValueError(f"{who} must return (advantages_by_group, returns_by_group), got {type(result).__name__}")
    by_group = as_groups(result[0], who)
    if len(by_group) != offsets.size - 1:
        raise ValueError(f"{who} returned advantages for {len(by_group)} groups, expected {offsets.size - 1}")
    parts = []
    for g, (advantages, size) in enumerate(zip(by_group, np.diff(offsets).tolist(), strict=True)):
        worded = wording(g)
        parts.append(_checked(call, as_advantages(advantages, worded.who or who), size, worded))
    return np.concatenate(parts) if parts else np.zeros(0)


def _shaped(values: np.ndarray, offsets: np.ndarray, live: np.ndarray | None, shapers: Shapers | None, role: str) -> np.ndarray:
    """``values`` ``(N,)`` with the shapers' terms (``live`` units only); ``values`` itself when there are none."""
    if shapers is None or not shapers.selected:
        return values
    if values.ndim == 2 and values.shape[1] == 1:  # one reward per unit, as a column (the collector's normalize_then_sum)
        return shapers.shape(values[:, 0], offsets, role, live)[:, None]
    if values.ndim != 1:
        raise ValueError(
            f"{shapers.where}: reward shapers add to one reward per unit; these units carry {values.shape[1]} rewards each (several reward "
            "functions combined by normalize_then_sum, or named rewards): give one reward per unit, or combine them by sum_then_normalize"
        )
    return shapers.shape(values, offsets, role, live)


def _outcome_kwargs(call: Call, lengths: np.ndarray | None, task_ids: np.ndarray | None, settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """The keywords of an outcome-level call: its options, the framework ``settings`` it names, and what it reads."""
    kwargs = dict(call.options)
    kwargs.update((key, value) for key, value in (settings or {}).items() if takes_keyword(call.estimator.spec, key))
    if call.needs.lengths and lengths is not None:
        kwargs["lengths"] = lengths
    if call.needs.state and task_ids is not None:
        kwargs["task_ids"] = task_ids
    return kwargs


def _transformed(
    advantages: np.ndarray, values: np.ndarray, scores: np.ndarray, offsets: np.ndarray, live: np.ndarray | None, transforms: Transforms | None, role: str
) -> np.ndarray:
    """The transforms' stage of an outcome-level run: one unit per row (``live`` ones only), ``rewards`` the rows' values as the
    estimator saw them (shaped), ``scores`` before shaping (a driver whose values carry a KL penalty gives its own ``scores``)."""
    if transforms is None or not transforms.selected:
        return advantages
    rows = values.shape[0]
    run_context = {"turn_index": np.zeros(rows, dtype=np.int64), **({"rewards": values, "scores": scores} if values.ndim == 1 else {})}
    if live is not None:
        transforms = replace(transforms, parts=[(p, g, live if u is None else u & live) for p, g, u in transforms.parts or [(role, None, None)]])
    return transforms.apply(advantages, np.diff(offsets), np.ones(rows, dtype=np.int64), run_context, role)


def run_outcome(
    call: Call,
    values: np.ndarray,
    offsets: np.ndarray,
    *,
    wording: Wording,
    role: str,
    state: EstimatorState | None = None,
    lengths: np.ndarray | None = None,
    live: np.ndarray | None = None,
    task_ids: np.ndarray | None = None,
    settings: Mapping[str, Any] | None = None,
    combine: Callable[..., Any] | None = None,
    context: Mapping[str, Any] | None = None,
    transforms: Transforms | None = None,
    shapers: Shapers | None = None,
) -> tuple[np.ndarray, Commit]:
    """Advantages ``(N,)`` float64 of an outcome-level ``call``'s batched form over ``values`` in groups ``offsets``, and its commit.

    ``values`` ``(N,)`` float64 (``(N, F)`` with ``combine``), ``offsets`` ``(G + 1,)`` int64. Inputs, each handed
    over only when the estimator reads it:

    - ``lengths`` ``(N,)``: each trajectory's response tokens (``call.needs.lengths``);
    - ``task_ids`` ``(N,)``: for a stateful estimator, whose state is ``state``'s for ``(name, role)``;
    - ``settings``: the framework's own settings (TRL's ``scale_rewards``), for an estimator naming them;
      never recorded with a state.

    ``live`` ``(N,)`` bool: the rows the estimator sees (verl: those with a model token); the others get 0 and never
    touch its state; ``lengths`` and ``task_ids`` are cut with them, a group left empty is dropped.
    ``combine(form, values, offsets, **kwargs)``: several rewards per row combined around the estimator's batched
    form (:func:`rllm_plugins.aggregation.aggregate_advantages`). ``context``: keywords the driver adds, never recorded
    with a state (the collector's ``algorithm_config``).
    ``transforms``: applied to the checked advantages, one unit per row (those ``live`` only); their metrics in it.
    ``shapers``: their terms added to ``values`` (``live`` rows only) before the estimator; their metrics and terms in it.
    """
    kwargs = _outcome_kwargs(call, lengths, task_ids, settings)
    scores = values
    values = _shaped(values, offsets, live, shapers, role)
    row_values, row_offsets = values, offsets
    expected = values.shape[0]
    if live is not None and live.all() and bool((offsets[1:] > offsets[:-1]).all()):
        live = None  # every row live and no group empty: nothing to cut
    if live is not None:
        group_of_row = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
        sizes = np.bincount(group_of_row[live], minlength=offsets.size - 1)
        values, offsets, expected = values[live], offsets_from_sizes(sizes[sizes > 0]), int(np.count_nonzero(live))
        kwargs.update((key, kwargs[key][live]) for key in ("lengths", "task_ids") if key in kwargs)
    kwargs.update(context or {})
    form = _form(call, call.estimator.batched_form)
    if combine is not None:
        form = functools.partial(combine, form)
    result, commit = _invoke(call, form, (values, offsets), kwargs, state, role)
    advantages = as_advantages(result, wording.who or call.who)
    if advantages.size != expected:
        raise ValueError(wording.wrong_size(call, advantages.size, expected))
    if live is not None:
        every = np.zeros(live.size, dtype=np.float64)
        every[live] = advantages
        advantages = every
    if not np.isfinite(advantages).all():
        raise ValueError(wording.not_finite(advantages, "advantage"))
    return _transformed(advantages, row_values, scores, row_offsets, live, transforms, role), commit


def run_outcome_listed(
    call: Call,
    values: np.ndarray,
    offsets: np.ndarray,
    *,
    wording: Callable[[int], Wording],
    role: str,
    context: Mapping[str, Any],
    state: EstimatorState | None = None,
    task_ids: np.ndarray | None = None,
    transforms: Transforms | None = None,
    shapers: Shapers | None = None,
) -> tuple[np.ndarray, Commit]:
    """:func:`run_outcome` for the collector's calls of the list form (rLLM's calling convention): ``context`` holds rLLM's
    keywords (``rewards`` by group, ``algorithm_config``, ``traj_groups``); the output is checked group by group,
    ``wording(g)`` wording group ``g``. Every row is live; the same shapers (``rewards`` by group shaped), state,
    transforms and commit."""
    kwargs = {**_outcome_kwargs(call, None, task_ids, None), **context}
    scores = values
    values = _shaped(values, offsets, None, shapers, role)
    if values is not scores:
        kwargs["rewards"] = [values[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)]
    result, commit = _invoke(call, _form(call, call.estimator.list_form), (), kwargs, state, role)
    advantages = _by_groups(call, result, offsets, wording)
    return _transformed(advantages, values, scores, offsets, None, transforms, role), commit


def run_steps(
    call: Call,
    batch: StepBatch,
    *,
    wording: Wording,
    role: str,
    state: EstimatorState | None = None,
    task_ids: np.ndarray | None = None,
    context: Mapping[str, Any] | None = None,
    transforms: Transforms | None = None,
    shapers: Shapers | None = None,
) -> tuple[np.ndarray, np.ndarray | None, Commit]:
    """Advantages ``(S,)`` float64 of a step-level ``call`` over ``batch``, its returns ``(S,)`` (a value-based
    estimator's, the critic's targets; else None) and its commit.

    The driver built ``batch`` with what ``call.needs`` names. ``context``: keywords the driver adds, never recorded
    with a state (the collector's ``algorithm_config`` and ``traj_groups``, verl's ``gamma`` and ``lam``). A stateful
    one (a composite's stateful term) gets ``task_ids`` ``(N,)`` and the state ``state`` keeps for ``(name, role)``:
    its options are checked against those the state was made with, and its commit records them, as at the outcome level.
    ``transforms``: applied to the checked advantages, one unit per step (the returns stay); their metrics in it.
    ``shapers``: one unit per trajectory; each trajectory's terms are added to its outcome and to its last step's reward.
    """
    needs = call.needs
    raw_step_rewards = batch.step_rewards
    if shapers is not None and shapers.selected:
        outcomes = _shaped(batch.outcomes, batch.traj_offsets, None, shapers, role)
        step_rewards = batch.step_rewards.copy()
        stepped = np.diff(batch.step_offsets) > 0
        step_rewards[batch.step_offsets[1:][stepped] - 1] += (outcomes - batch.outcomes)[stepped]
        batch = replace(batch, outcomes=outcomes, step_rewards=step_rewards)
    kwargs = {**call.options, **(context or {})}
    if needs.state:
        kwargs["task_ids"] = task_ids
    form = _form(call, call.estimator.batched_form)
    result, commit = _invoke(call, form, (batch,), kwargs, state, role)
    if needs.values:
        advantages, returns = split_step_output(result, True, batch.num_steps, call.who)
    else:
        advantages, returns = as_advantages(result, wording.who or call.who), None
        if advantages.size != batch.num_steps:
            raise ValueError(wording.wrong_size(call, advantages.size, batch.num_steps))
    for what, checked in (("advantage", advantages), ("return", returns)):
        if checked is not None and not np.isfinite(checked).all():
            raise ValueError(wording.not_finite(checked, what))
    if transforms is not None and transforms.selected:  # the advantages are the estimator's, checked: the transforms' place
        steps = np.diff(batch.step_offsets)
        turn_index = np.arange(batch.num_steps) - np.repeat(batch.step_offsets[:-1], steps)
        group_sizes = np.diff(batch.step_offsets[batch.traj_offsets])
        run_context = {"rewards": batch.step_rewards, "scores": raw_step_rewards, "turn_index": turn_index}
        advantages = transforms.apply(advantages, group_sizes, steps, run_context, role)
    return advantages, returns, commit
