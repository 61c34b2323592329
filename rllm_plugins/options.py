"""Estimator options: the keyword arguments a user may set for an estimator, checked before it runs.

An estimator's *options* are the keyword parameters of the forms its spec gives (``fn``,
``batched``), without the arguments the framework itself passes (:data:`CONTEXT_KEYS`), plus
the names its spec declares in ``AdvEstimatorSpec.options``. An estimator that takes
``**kwargs`` and declares no ``options`` is *open*: any key may be meant for it, so unknown keys
pass, except a near miss of an option it names (``trimm`` for ``trim``): that is refused as a typo, naming the option
(:data:`NEAR_MISS`); an estimator that does read such a key declares its options. A value is checked against the type of the parameter's default (a bool
default takes a bool, a float default a finite real number, an int default an int, a str
default a str); ``epsilon`` (and the spec's spelling ``episilon``) must be a finite number >= 0. A
number is an int or a float (Python or numpy): a ``Fraction``, which numpy cannot compute with, is refused.

``norm_adv_by_std_in_grpo`` is never an option: it has its own configuration field, which the
error names.
"""

from __future__ import annotations

import functools
import inspect
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .calling import FRAMEWORK_KEYWORDS, describe, is_finite_real, short_repr
from .spec import AdvEstimatorSpec, is_plain_real
from .state.views import absorb

if TYPE_CHECKING:
    from .spec import Estimator

__all__ = ["CONTEXT_KEYS", "EstimatorOptions", "check_estimator_kwargs", "check_given_options", "spec_options", "state_options"]

CONTEXT_KEYS = FRAMEWORK_KEYWORDS
"""Arguments the collector and the adapters pass themselves; never set through estimator kwargs."""

_NO_DEFAULT = inspect.Parameter.empty
_NON_NEGATIVE = frozenset({"epsilon", "episilon"})


@dataclass(frozen=True)
class EstimatorOptions:
    """The options of one estimator: ``defaults`` name -> default (``inspect.Parameter.empty`` if none), ``open``."""

    defaults: Mapping[str, Any]
    open: bool


def _signature_options(fn: Callable[..., Any]) -> tuple[dict[str, Any], bool]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # no signature: nothing is known
        return {}, True
    named = {p.name: p.default for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in CONTEXT_KEYS}
    return named, any(p.kind is p.VAR_KEYWORD for p in params)


@functools.lru_cache(maxsize=256)
def _options_cached(fn: Callable[..., Any] | None, batched: Callable[..., Any] | None, declared: tuple[str, ...] | None) -> EstimatorOptions:
    defaults: dict[str, Any] = {}
    var_kw = False
    for form in (fn, batched):
        if form is None:
            continue
        named, takes_kwargs = _signature_options(form)
        for name, default in named.items():
            defaults.setdefault(name, default)
        var_kw = var_kw or takes_kwargs
    for name in declared or ():
        defaults.setdefault(name, _NO_DEFAULT)
    return EstimatorOptions(defaults, open=var_kw and declared is None)


def spec_options(spec: AdvEstimatorSpec) -> EstimatorOptions:
    """The options of an :class:`AdvEstimatorSpec`: its forms' keyword parameters plus its declared ``options``."""
    declared = spec.options
    try:
        return _options_cached(spec.fn, spec.batched, declared)
    except TypeError:  # an unhashable callable
        return _options_cached.__wrapped__(spec.fn, spec.batched, declared)


def _value_problem(key: str, value: Any, default: Any) -> str | None:
    """Why ``value`` does not fit option ``key`` whose default is ``default`` (None when it fits)."""
    shown = describe(value)
    if key in _NON_NEGATIVE:
        if not is_plain_real(value):
            return f"must be a number >= 0, got {shown}{_as_float_hint(value)}"
        if not is_finite_real(value) or value < 0:
            return f"must be a finite number >= 0, got {short_repr(value)}"
        return None
    if default is _NO_DEFAULT or default is None:
        return None
    if isinstance(default, bool):
        return None if isinstance(value, (bool, np.bool_)) else f"must be a bool (True or False), got {shown}"
    if isinstance(default, numbers.Integral):
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            return f"must be an int, got {shown}"
        return None if is_finite_real(value) else f"must be an int within the float64 range, got {short_repr(value)}"
    if isinstance(default, numbers.Real):
        if not is_plain_real(value):
            return f"must be a number, got {shown}{_as_float_hint(value)}"
        return None if is_finite_real(value) else f"must be finite, got {short_repr(value)}"
    if isinstance(default, str):
        return None if isinstance(value, str) else f"must be a str, got {shown}"
    return None


def _as_float_hint(value: Any) -> str:
    """Advice for a real number numpy cannot compute with (a ``Fraction``): convert it."""
    return "; numpy cannot compute with it: pass float(value)" if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) else ""


def check_estimator_kwargs(selected: Mapping[str, Estimator], kwargs: Mapping[str, Any], *, where: str, norm_field: str) -> None:
    """Check the user's estimator ``kwargs`` against the options of the estimators a config selects (name -> resolved estimator).

    Every key must be an option of at least one of them (or one of them is open), and its value
    must fit each estimator that names it. Raises ``ValueError`` naming ``where`` (the setting),
    the key, the estimators with their providers, and the accepted keys; ``norm_field`` is the
    setting to use instead of a ``norm_adv_by_std_in_grpo`` key.
    """
    estimators = [(name, estimator, spec_options(estimator.spec)) for name, estimator in selected.items()]
    listed = ", ".join(f"{name!r} ({estimator.provider})" for name, estimator, _ in estimators)
    who = f"estimator {listed}, which accepts" if len(estimators) == 1 else f"estimators {listed}, which accept"
    accepted = sorted({key for *_, options in estimators for key in options.defaults})
    for key, value in kwargs.items():
        if not isinstance(key, str):
            raise ValueError(f"{where}: option names must be str, got {type(key).__name__} {key!r}")
        if key == "norm_adv_by_std_in_grpo":
            raise ValueError(f"{where}: norm_adv_by_std_in_grpo is not an estimator option; set {norm_field} instead")
        if key in CONTEXT_KEYS:
            raise ValueError(f"{where}: {key!r} is passed by the framework to every estimator call; it cannot be set as an option")
        taking = [(name, options) for name, _, options in estimators if key in options.defaults]
        if not taking and not any(options.open for *_, options in estimators):
            raise ValueError(_unknown(where, key, who, accepted))
        if not taking:  # an open estimator takes any key: one this close to an option it names is a typo of it
            _refuse_near_miss(where, key, [(name, estimator, options) for name, estimator, options in estimators if options.open])
        for name, options in taking:
            problem = _value_problem(key, value, options.defaults[key])
            if problem is not None:
                raise ValueError(f"{where}: option {key!r} of estimator {name!r} {problem}")
    for name, estimator, options in estimators:  # with no kwargs too: an estimator that cannot run without options says so now
        if estimator.spec.check_options is not None:
            given = {k: v for k, v in kwargs.items() if k in options.defaults}
            try:
                estimator.spec.check_options(given)
            except ValueError as e:
                if given:
                    raise ValueError(f"{where}: {e}") from None
                raise ValueError(f"{where}: estimator {name!r} needs options: {str(e).removeprefix(f'estimator {name!r}: ')}") from None


def check_given_options(name: str, estimator: Estimator, kwargs: Mapping[str, Any], *, where: str, norm_field: str) -> None:
    """:func:`check_estimator_kwargs` for one estimator (selected as ``name``), and its own check also when ``kwargs`` is empty.

    An estimator that cannot run without options (``composite`` without ``terms``) raises
    ``ValueError`` saying it needs options and what its check asks for.
    """
    check_estimator_kwargs({name: estimator}, kwargs, where=where, norm_field=norm_field)


NEAR_MISS = 0.8
"""How close (``difflib`` ratio) an unknown key must be to a named option of an open estimator to be refused as its typo."""


def _refuse_near_miss(where: str, key: str, open_estimators: list[tuple[str, Estimator, EstimatorOptions]]) -> None:
    """Refuse ``key`` when it is a near miss of an option that one of ``open_estimators`` (``**kwargs``, no declared options) names."""
    import difflib  # only for keys no estimator names

    for name, estimator, options in open_estimators:
        close = difflib.get_close_matches(key, list(options.defaults), n=1, cutoff=NEAR_MISS)
        if close:
            raise ValueError(
                f"{where}: unknown option {key!r} for estimator {name!r} ({estimator.provider}). Did you mean {close[0]!r}? Its **kwargs "
                f"would take {key!r} and the run would use the default of {close[0]!r} without a word. An estimator that does read "
                f"{key!r} declares it: AdvEstimatorSpec(options=({key!r}, ...))"
            )


def _unknown(where: str, key: str, who: str, accepted: list[str]) -> str:
    import difflib  # only on this error path

    close = difflib.get_close_matches(key, accepted, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    listing = f": {', '.join(accepted)}" if accepted else " no options"
    return f"{where}: unknown option {key!r} for {who}{listing}.{hint}"


def state_options(spec: AdvEstimatorSpec, given: Mapping[str, Any]) -> dict[str, Any]:
    """The options a call of ``spec`` runs with: each declared option's value (``given``, else its default), plain data.

    An open estimator (``**kwargs`` and no declared options) records every key of ``given``.
    """
    options = spec_options(spec)
    out = {key: given.get(key, default) for key, default in options.defaults.items() if key in given or default is not inspect.Parameter.empty}
    if options.open:
        out.update(given)
    return {key: _recordable(value) for key, value in sorted(out.items())}


def _recordable(value: Any) -> Any:
    try:
        return absorb(value, "", "")
    except ValueError:
        return repr(value)
