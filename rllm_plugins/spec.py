"""What an estimator is: :class:`AdvEstimatorSpec`, its two calling forms and how each derives the other.

**List form** (rLLM's API): ``fn(rewards=list[np.ndarray], **kwargs) -> (advantages_by_group, returns_by_group)``,
both sequences aligned with ``rewards``. Functions written for either rLLM generation,
``(rewards, norm_adv_by_std_in_grpo, episilon, **kw)`` or ``(rewards, algorithm_config, **kw)``, fit.

Step-level estimators (``level="step"``) have forms of their own: :mod:`.steps.forms`; estimators with
memory (``stateful=True``) take a ``state`` and return it updated: :mod:`.state`.

**Batched form** (used by the adapters): ``batched(values, offsets, **kwargs) -> advantages`` with
``values`` float64 ``(N,)``, ``offsets`` int64 ``(G + 1,)`` (see :mod:`.segments`) and
advantages float64 ``(N,)``; returns equal advantages for every built-in.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from .calling import (
    accepted_keywords,
    call_with_accepted_kwargs,
    check_call_options,
    closed_keywords,
    flatten_groups,
    is_plain_real,
    refuse_unknown_options,
)
from .names import normalize_name, validate_name
from .outputs import as_advantages, as_groups
from .segments import GroupLayout
from .steps.forms import step_batched_form_of, step_list_form_of

__all__ = [
    "AdvEstimatorSpec",
    "BatchedEstimator",
    "Estimator",
    "ListEstimator",
    "accepted_keywords",
    "call_with_accepted_kwargs",
    "flatten_groups",
    "is_plain_real",
    "normalize_name",
    "Provider",
    "unapplied_loss_warning",
]

ListEstimator = Callable[..., tuple[Sequence[Any], Sequence[Any]]]
LEVELS = ("outcome", "step")  # AdvEstimatorSpec.level: one advantage per trajectory, or one per step


class BatchedEstimator(Protocol):
    def __call__(self, values: np.ndarray, offsets: np.ndarray, /, **kwargs: Any) -> np.ndarray: ...


def _lengths_from_groups(traj_groups: Sequence[Any] | None) -> np.ndarray | None:
    """Response length of every trajectory (sum over its steps), flat in group order."""
    if traj_groups is None:
        return None
    return np.array(
        [sum(len(step.response_ids) for step in traj.steps) for group in traj_groups for traj in group.trajectories],
        dtype=np.float64,
    )


def _is_algorithm_config(value: Any) -> bool:
    """Whether a positional argument is an rLLM ``AlgorithmConfig`` (any object with its attributes, as rLLM reads it)."""
    return not isinstance(value, (bool, int, float, np.generic, np.ndarray)) and hasattr(value, "norm_adv_by_std_in_grpo") and hasattr(value, "estimator")


def _bind_positional(name: str, args: tuple[Any, ...], kwargs: dict[str, Any], spec_names: tuple[str, ...], main_names: tuple[str, ...]) -> None:
    """Put positional ``args`` into ``kwargs``: ``(algorithm_config, *main_names)`` or ``(*spec_names)``."""
    names = spec_names
    if args and _is_algorithm_config(args[0]):
        if "algorithm_config" in kwargs:
            raise TypeError(f"{name}() got multiple values for argument 'algorithm_config'")
        kwargs["algorithm_config"], args, names = args[0], args[1:], main_names
    if len(args) > len(names):
        forms = [f"rewards, {', '.join(spec_names)}" if spec_names else "rewards", f"rewards, algorithm_config{''.join(', ' + n for n in main_names)}"]
        raise TypeError(f"{name}() takes at most {len(names)} positional argument(s) after rewards here ({' | '.join(forms)}), got {len(args)}")
    for key, value in zip(names, args, strict=False):
        if key in kwargs:
            raise TypeError(f"{name}() got multiple values for argument {key!r}")
        kwargs[key] = value


def list_form_of(batched: BatchedEstimator, name: str | None = None, *, spec_args: tuple[str, ...] = (), main_args: tuple[str, ...] = ()) -> ListEstimator:
    """Wrap a batched estimator in rLLM's list-of-arrays calling convention, for both rLLM signatures.

    ``fn(rewards, *spec_args, **kw)`` (the spec's) and ``fn(rewards, algorithm_config, *main_args, **kw)``
    (rLLM main's) both work, positionally or by keyword. ``algorithm_config.norm_adv_by_std_in_grpo``
    is used unless ``norm_adv_by_std_in_grpo`` is given explicitly (the explicit keyword wins); a batched
    form with a named ``algorithm_config`` parameter is handed the config. A keyword that is neither an
    option of ``batched`` nor one the framework passes is refused (:func:`closed_keywords`).
    """
    func_name = name or getattr(batched, "__name__", "estimator")
    who = f"estimator {func_name!r}"
    accepted = closed_keywords(batched)

    def list_form(rewards: Sequence[Any], *args: Any, **kwargs: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
        if args:
            _bind_positional(func_name, args, kwargs, spec_args, main_args)
        refuse_unknown_options(func_name, kwargs, accepted)
        if "episilon" in kwargs:  # the spec's spelling
            kwargs.setdefault("epsilon", kwargs.pop("episilon"))
        config = kwargs.pop("algorithm_config", None)
        source = ""
        if config is not None and "norm_adv_by_std_in_grpo" not in kwargs and hasattr(config, "norm_adv_by_std_in_grpo"):
            kwargs["norm_adv_by_std_in_grpo"], source = config.norm_adv_by_std_in_grpo, " (from algorithm_config)"
        check_call_options(func_name, kwargs, source)
        if len(rewards) == 0:
            return [], []
        traj_groups = kwargs.pop("traj_groups", None)
        values, offsets = flatten_groups(rewards)
        if kwargs.get("lengths") is None:
            lengths = _lengths_from_groups(traj_groups)
            if lengths is not None and lengths.size == values.size:
                kwargs["lengths"] = lengths
        if config is not None and "algorithm_config" in accepted_keywords(batched)[0]:  # a batched form that reads the config (pkpo)
            kwargs["algorithm_config"] = config
        advantages = as_advantages(batched(values, offsets, **kwargs), who)
        by_group = GroupLayout.from_offsets(offsets, values.size).split(advantages)
        return by_group, list(by_group)

    list_form.__doc__ = batched.__doc__
    list_form.__name__ = list_form.__qualname__ = func_name
    return list_form


def _takes_algorithm_config(fn: Callable[..., Any]) -> bool:
    names, var_kw = accepted_keywords(fn)
    return var_kw or "algorithm_config" in names


def _algorithm_config_of(name: str | None, kwargs: dict[str, Any]) -> Any:
    """The ``AlgorithmConfig`` an rLLM main estimator reads (``fn(rewards, algorithm_config, **kw)``), from the call's options."""
    from .config import AlgorithmConfig  # config imports this module

    norm = kwargs.get("norm_adv_by_std_in_grpo", True)
    return AlgorithmConfig(estimator=name or "grpo", norm_adv_by_std_in_grpo=bool(norm))


def batched_form_of(fn: ListEstimator, name: str | None = None) -> BatchedEstimator:
    """Wrap a list-form estimator so it takes (values, offsets): one array per group, then concatenated (``name`` for errors).

    An estimator written to rLLM main's ``fn(rewards, algorithm_config, **kw)`` (or taking ``**kwargs``)
    gets an ``AlgorithmConfig`` of ``name`` and the call's ``norm_adv_by_std_in_grpo`` when the caller
    (the verl or TRL adapter) passes none.
    """
    who = f"estimator {name or getattr(fn, '__name__', fn)!r}"

    def batched(values: np.ndarray, offsets: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        layout = GroupLayout.from_offsets(offsets, len(values))
        if "algorithm_config" not in kwargs and _takes_algorithm_config(fn):
            kwargs["algorithm_config"] = _algorithm_config_of(name, kwargs)
        advantages, _returns = call_with_accepted_kwargs(fn, rewards=layout.split(np.asarray(values, dtype=np.float64)), **kwargs)
        advantages = as_groups(advantages, who)
        if len(advantages) != layout.num_groups:
            raise ValueError(f"{who} returned {len(advantages)} groups of advantages for {layout.num_groups} groups")
        parts = [as_advantages(a, who) for a in advantages]
        for g, (part, size) in enumerate(zip(parts, layout.sizes.tolist(), strict=True)):
            if part.size != size:
                raise ValueError(f"{who} returned {part.size} advantages for group {g} of {size} trajectories")
        return np.concatenate(parts) if parts else np.zeros(0)

    batched.__doc__ = fn.__doc__
    batched.__name__ = getattr(fn, "__name__", "estimator")
    return batched


def stateful_list_form_of(batched: Callable[..., Any], name: str) -> Callable[..., Any]:
    """The list form of a stateful batched estimator: ``fn(rewards, *, state, **kw) -> ((adv_by_group, returns_by_group), new_state)``.

    An empty ``rewards`` leaves the state as it was.
    """
    try:
        signature = inspect.signature(batched)
        options_signature = signature.replace(parameters=[p for p in signature.parameters.values() if p.name != "state"])
    except (TypeError, ValueError):  # no readable signature: any option may be meant for it
        options_signature = inspect.Signature([inspect.Parameter("options", inspect.Parameter.VAR_KEYWORD)])

    def list_form(rewards: Sequence[Any], *args: Any, state: Mapping[str, Any] | None = None, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        before = dict(state or {})
        after: dict[str, Any] = {}

        def step(values: np.ndarray, offsets: np.ndarray, /, **options: Any) -> np.ndarray:
            advantages, new_state = batched(values, offsets, state=before, **options)
            after["state"] = new_state
            return advantages

        step.__name__ = getattr(batched, "__name__", name)
        step.__signature__ = options_signature  # type: ignore[attr-defined]  # its options are the estimator's: unknown ones are refused
        result = list_form_of(step, name)(rewards, *args, **kwargs)
        return result, after.get("state", before)

    list_form.__doc__ = batched.__doc__
    list_form.__name__ = list_form.__qualname__ = name
    return list_form


def stateful_batched_form_of(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """The batched form of a stateful list estimator: ``batched(values, offsets, /, *, state, **kw) -> (advantages, new_state)``."""

    def batched(values: np.ndarray, offsets: np.ndarray, /, *, state: Mapping[str, Any] | None = None, **kwargs: Any) -> tuple[np.ndarray, Any]:
        after: dict[str, Any] = {}

        def step(rewards: Sequence[Any], **options: Any) -> Any:
            out = fn(rewards, state=dict(state or {}), **options)
            if not isinstance(out, tuple) or len(out) != 2:
                raise ValueError(f"estimator {name!r} is stateful and must return ((advantages_by_group, returns_by_group), new_state)")
            after["state"] = out[1]
            return out[0]

        step.__signature__ = _without_state(fn)  # type: ignore[attr-defined]
        advantages = batched_form_of(step, name)(values, offsets, **kwargs)
        return advantages, after.get("state", dict(state or {}))

    batched.__doc__ = fn.__doc__
    batched.__name__ = getattr(fn, "__name__", name)
    return batched


def _without_state(fn: Callable[..., Any]) -> Any:
    """``fn``'s signature without its ``state`` parameter (so keyword filtering sees the estimator's own)."""
    import inspect

    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    return signature.replace(parameters=[p for p in signature.parameters.values() if p.name != "state"])


@dataclass(frozen=True)
class AdvEstimatorSpec:
    """One estimator a plugin contributes.

    Give ``fn`` (list form), ``batched`` (batched form) or both; the missing one is derived.
    ``name`` and ``aliases`` are normalised to lower case and must match ``[a-z][a-z0-9_]*``.
    ``group_order_invariant`` declares that permuting whole groups permutes the output the
    same way (true for every per-group and role-level statistic). ``options`` names the keyword
    options an estimator with ``**kwargs`` reads beyond its named parameters (``()``: none); left
    None, any key is accepted (see :mod:`.options`). ``check_group_size(options, group_size)``, when
    given, raises ``ValueError`` at config time for options that cannot work with the configured
    number of trajectories per prompt (TRL's ``num_generations``, verl's ``rollout.n``).

    ``level`` is ``"outcome"`` (one advantage per trajectory, broadcast to its steps) or ``"step"``
    (one advantage per step; the forms of :mod:`.steps.forms`); ``needs_anchors`` declares that a
    step-level estimator reads anchor states. ``check_options(options)``, when given, raises
    ``ValueError`` for option values its types cannot express (ranges, choices), wherever options
    are checked.

    ``stateful=True`` declares an estimator with memory across calls (a running baseline): its
    forms take ``state`` and return ``(result, new_state)`` (:mod:`.state`); outcome level only.

    ``needs_for(options) -> Needs``, when given, says what the estimator reads beyond its declared flags
    with these options (``composite``: what its terms need); every path asks :func:`.needs.needs_of`.
    ``needs_values=True`` declares a value-based step-level estimator: it reads a critic's value of every
    step (``StepBatch.step_values``; in the core ``Step.value``, in verl the critic's ``values`` at each
    turn's first model token) and gives the critic's targets as its returns: its batched form returns
    ``(advantages, returns)`` (:mod:`.steps.forms`). TRL has no critic and refuses such estimators.
    ``state_schema`` (stateful only) declares the keys its state may hold and their kinds
    (:mod:`.state.schema`), checked when a state is loaded and on what each call changes.
    ``breaks`` maps a relation of the conformance matrix (:mod:`.testing.matrix`) that the estimator
    breaks on purpose to the reason (e.g. ``{"no_token_rows": "reproduces verl's gpg, whose statistics
    count padding rows"}``); the matrix reports such a cell as declared, and the docs list every one.
    ``trainer_loss`` names a loss term the method adds to the policy-gradient loss (ECHO's environment-token loss): the
    advantages alone are not the method, and the verl and TRL adapters, which apply their framework's own loss, say so at
    config time (:func:`unapplied_loss_warning`).
    """

    name: str
    fn: ListEstimator | None = None
    batched: BatchedEstimator | None = None
    description: str = ""
    aliases: tuple[str, ...] = ()
    group_order_invariant: bool = True
    options: tuple[str, ...] | None = None
    check_group_size: Callable[[Mapping[str, Any], int], object] | None = field(default=None, compare=False)
    level: str = "outcome"
    needs_anchors: bool = False
    check_options: Callable[[Mapping[str, Any]], object] | None = field(default=None, compare=False)
    stateful: bool = False
    needs_for: Callable[[Mapping[str, Any]], Any] | None = field(default=None, compare=False)
    needs_values: bool = False
    state_schema: Mapping[str, Any] | None = field(default=None, compare=False)
    breaks: Mapping[str, str] | None = field(default=None, compare=False)
    trainer_loss: str = ""
    list_form: ListEstimator = field(init=False, repr=False, compare=False)
    batched_form: BatchedEstimator = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", validate_name(self.name))
        object.__setattr__(self, "aliases", tuple(validate_name(a, f"aliases of {self.name!r}") for a in self.aliases))
        repeated = [n for i, n in enumerate(self.names) if n in self.names[:i]]
        if repeated:
            raise ValueError(f"estimator {self.name!r}: name and aliases must all differ, but {repeated[0]!r} is given twice (aliases {self.aliases!r})")
        if self.options is not None:
            if isinstance(self.options, str) or not all(isinstance(o, str) for o in self.options):
                raise TypeError(f"estimator {self.name!r}: options must be a sequence of option names (str), got {self.options!r}")
            object.__setattr__(self, "options", tuple(self.options))
        if self.fn is None and self.batched is None:
            raise ValueError(f"estimator {self.name!r} needs a list-form `fn`, a `batched` form, or both")
        if self.fn is not None and not callable(self.fn):
            raise TypeError(f"estimator {self.name!r}: fn must be callable, got {type(self.fn).__name__}")
        if self.check_group_size is not None and not callable(self.check_group_size):
            raise TypeError(f"estimator {self.name!r}: check_group_size must be callable, got {type(self.check_group_size).__name__}")
        if self.check_options is not None and not callable(self.check_options):
            raise TypeError(f"estimator {self.name!r}: check_options must be callable, got {type(self.check_options).__name__}")
        if self.needs_for is not None and not callable(self.needs_for):
            raise TypeError(f"estimator {self.name!r}: needs_for must be callable, got {type(self.needs_for).__name__}")
        for flag in ("group_order_invariant", "needs_anchors", "needs_values"):
            value = getattr(self, flag)
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"estimator {self.name!r}: {flag} must be a bool (True or False), got {type(value).__name__} {value!r}")
            object.__setattr__(self, flag, bool(value))
        if self.level not in LEVELS:
            raise ValueError(f"estimator {self.name!r}: level must be one of {list(LEVELS)}, got {self.level!r}")
        if self.needs_anchors and self.level != "step":
            raise ValueError(f"estimator {self.name!r}: needs_anchors=True needs level='step'")
        if self.needs_values and self.level != "step":
            raise ValueError(f"estimator {self.name!r}: needs_values=True (a value per step) needs level='step'")
        if self.batched is not None and not callable(self.batched):
            raise TypeError(f"estimator {self.name!r}: batched must be callable, got {type(self.batched).__name__}")
        description = self.description or _first_line(self.fn or self.batched)
        object.__setattr__(self, "description", description)
        if not isinstance(self.stateful, bool):
            raise TypeError(f"estimator {self.name!r}: stateful must be a bool, got {type(self.stateful).__name__} {self.stateful!r}")
        if self.stateful:
            if self.level != "outcome":
                raise ValueError(f"estimator {self.name!r}: stateful=True is supported for level='outcome' only, got level={self.level!r}")
            for form in (self.fn, self.batched):
                if form is not None and "state" not in accepted_keywords(form)[0]:
                    raise ValueError(
                        f"estimator {self.name!r} is declared stateful=True, so its forms must take a `state` keyword parameter; {form!r} does not"
                    )
        if self.state_schema is not None:
            if not self.stateful:
                raise ValueError(f"estimator {self.name!r}: state_schema needs stateful=True")
            from .state.schema import check_schema

            object.__setattr__(self, "state_schema", check_schema(self.state_schema, f"estimator {self.name!r}"))
        object.__setattr__(self, "breaks", _checked_breaks(self.name, self.breaks))
        if not isinstance(self.trainer_loss, str):
            raise TypeError(f"estimator {self.name!r}: trainer_loss must be a str (the loss term, in words), got {type(self.trainer_loss).__name__}")
        if self.stateful:
            to_list, to_batched = stateful_list_form_of, stateful_batched_form_of
        elif self.level == "step":
            to_list = functools.partial(step_list_form_of, with_returns=self.needs_values)
            to_batched = functools.partial(step_batched_form_of, with_returns=self.needs_values)
        else:
            to_list, to_batched = list_form_of, batched_form_of
        object.__setattr__(self, "list_form", self.fn if self.fn is not None else to_list(self.batched, self.name))  # type: ignore[arg-type]
        object.__setattr__(self, "batched_form", self.batched if self.batched is not None else to_batched(self.fn, self.name))  # type: ignore[arg-type]

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


def unapplied_loss_warning(spec: AdvEstimatorSpec, selected_as: str, trainer: str) -> str | None:
    """What a user of ``trainer`` (which applies its own loss) is told when selecting ``spec`` as ``selected_as``: that the
    method's ``trainer_loss`` is not applied, so the run trains on its advantages with the framework's loss only. None when the
    spec names no such loss."""
    if not spec.trainer_loss:
        return None
    return (
        f"estimator {selected_as!r}: {trainer} applies its own loss, not {spec.trainer_loss}; the run trains on the advantages of {spec.name!r} "
        "without that term, which is not the whole method. Apply the term in your trainer's loss, or choose another estimator"
    )


def _checked_breaks(name: str, breaks: object) -> Mapping[str, str]:
    """``breaks`` as a read-only mapping of relation names to non-empty reasons, else ``ValueError`` naming the entry."""
    from types import MappingProxyType

    if breaks is None:
        return MappingProxyType({})
    if not isinstance(breaks, Mapping):
        raise ValueError(f"estimator {name!r}: breaks must map relation names to reasons (str -> str), got {type(breaks).__name__} {breaks!r}")
    for relation, reason in breaks.items():
        if not isinstance(relation, str) or not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"estimator {name!r}: breaks[{relation!r}] must be a relation name (str) with a non-empty reason (str), got {reason!r}")
    return MappingProxyType(dict(breaks))


def _first_line(obj: object) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


@dataclass(frozen=True)
class Provider:
    """Where an estimator comes from: the built-ins, an installed plugin, or user code."""

    plugin: str
    distribution: str | None = None
    version: str | None = None
    kind: Literal["builtin", "plugin", "user"] = "plugin"

    def __str__(self) -> str:
        if self.kind == "builtin":
            return "rllm-plugins (built-in)"
        if self.kind == "user":
            return f"user code ({self.plugin})"
        dist = f"{self.distribution} {self.version}" if self.distribution else "unknown distribution"
        return f"plugin {self.plugin!r} (distribution {dist})"


def _annotate(fn: Callable[..., Any], where: str) -> Callable[..., Any]:
    """Wrap ``fn`` so that an exception it raises names ``where`` (a note on the same exception)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            if not hasattr(e, "add_note"):  # Python < 3.11
                raise RuntimeError(f"{where}: {type(e).__name__}: {e}") from e
            e.add_note(where)
            raise

    return call


def _refusing_unknown_options(fn: Callable[..., Any], spec: AdvEstimatorSpec) -> Callable[..., Any]:
    """Wrap a plugin's own list form so that a keyword it does not take is refused, as ``AlgorithmConfig`` does (open forms: as is)."""
    accepted = closed_keywords(spec.fn, declared=spec.options)
    if accepted is None:
        return fn

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        refuse_unknown_options(spec.name, kwargs, accepted)
        return fn(*args, **kwargs)

    return call


@dataclass(frozen=True, eq=False)
class Estimator:
    """A registered estimator: its spec, provider, and both calling forms (plugin errors name the plugin)."""

    spec: AdvEstimatorSpec
    provider: Provider
    list_form: Callable[..., Any] = field(init=False, repr=False)
    batched_form: Callable[..., Any] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        list_form, batched_form = self.spec.list_form, self.spec.batched_form
        if self.provider.kind == "plugin":
            where = f"raised by estimator {self.spec.name!r} of {self.provider}"
            list_form, batched_form = _annotate(list_form, where), _annotate(batched_form, where)
            if self.spec.fn is not None:  # a derived list form refuses unknown options itself
                list_form = _refusing_unknown_options(list_form, self.spec)
        object.__setattr__(self, "list_form", list_form)
        object.__setattr__(self, "batched_form", batched_form)
