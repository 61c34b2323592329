"""Calling estimators: the keyword arguments a function accepts, rewards flattened and checked, call options checked."""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .outputs import _is_tensor
from .segments import offsets_from_sizes

__all__ = [
    "FRAMEWORK_KEYWORDS",
    "accepted_keywords",
    "as_finite_real",
    "call_with_accepted_kwargs",
    "check_call_options",
    "closed_keywords",
    "describe",
    "flatten_groups",
    "is_finite_real",
    "is_plain_real",
    "refuse_unknown_options",
    "short_repr",
    "takes_keyword",
]

FRAMEWORK_KEYWORDS = frozenset(
    {
        "rewards",
        "values",
        "offsets",
        "algorithm_config",
        "traj_groups",
        "lengths",
        "norm_adv_by_std_in_grpo",
        "step_rewards",
        "anchor_states",
        "step_values",
        "step_tokens",
        "state",
        "task_ids",
    }
)
"""Arguments the collector, the adapters and rLLM's callers pass themselves (never estimator options)."""
_RLLM_SPELLINGS = frozenset({"episilon", "epsilon"})  # every estimator of the spec takes one (spelt episilon there)


def takes_keyword(spec: Any, keyword: str) -> bool:
    """Whether the estimator ``spec`` (an :class:`~rllm_plugins.spec.AdvEstimatorSpec`) names ``keyword`` as a parameter
    (of its batched form, else of its list form)."""
    form = spec.batched if spec.batched is not None else spec.fn
    return keyword in accepted_keywords(form)[0]


def accepted_keywords(fn: Callable[..., Any]) -> tuple[frozenset[str], bool]:
    """Keyword names ``fn`` accepts, and whether it takes ``**kwargs`` (cached per function: estimators run every step)."""
    try:
        return _accepted_keywords_cached(fn)
    except TypeError:  # an unhashable callable
        return _accepted_keywords(fn)


def _accepted_keywords(fn: Callable[..., Any]) -> tuple[frozenset[str], bool]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: pass everything
        return frozenset(), True
    names = frozenset(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    return names, any(p.kind is p.VAR_KEYWORD for p in params)


_accepted_keywords_cached = functools.lru_cache(maxsize=256)(_accepted_keywords)


def call_with_accepted_kwargs(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` with the keyword arguments it accepts (all of them if it takes ``**kwargs``)."""
    names, var_kw = accepted_keywords(fn)
    if not var_kw:
        kwargs = {k: v for k, v in kwargs.items() if k in names}
    return fn(*args, **kwargs)


def closed_keywords(*forms: Callable[..., Any] | None, declared: tuple[str, ...] | None = None) -> frozenset[str] | None:
    """Every keyword a call of these forms may carry, or None when any key may be meant for them (open).

    The forms' named parameters, the framework's arguments and ``declared`` option names. A form with
    ``**kwargs`` is open unless its spec declares its options (``declared`` not None) or its catch-all is
    named ``_`` (the built-ins' way of saying it takes only the framework's arguments).
    """
    names: set[str] = set(FRAMEWORK_KEYWORDS | _RLLM_SPELLINGS | set(declared or ()))
    for form in forms:
        if form is None:
            continue
        named, var_kw = accepted_keywords(form)
        names |= named
        if var_kw and declared is None and not _catch_all_is_underscore(form):
            return None
    return frozenset(names)


def _catch_all_is_underscore(fn: Callable[..., Any]) -> bool:
    try:
        return any(p.kind is p.VAR_KEYWORD and p.name == "_" for p in inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False


def refuse_unknown_options(func_name: str, kwargs: Any, accepted: frozenset[str] | None) -> None:
    """``ValueError`` for a keyword not in ``accepted`` (None: accept all), naming the closest accepted option."""
    if accepted is None:
        return
    unknown = [key for key in kwargs if key not in accepted]
    if not unknown:
        return
    import difflib  # only on this error path

    options = sorted(accepted - FRAMEWORK_KEYWORDS - {"episilon"})
    close = difflib.get_close_matches(str(unknown[0]), sorted(accepted), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    listing = ", ".join(options) if options else "none"
    raise ValueError(f"{func_name}(): unknown option {unknown[0]!r}; its options: {listing}.{hint}")


def as_finite_real(value: Any) -> float | None:
    """``value`` as a float if it is a finite real number, else None.

    Bools and numpy bools count as 0/1 (as numpy reads them); an int beyond the float64 range
    (``10**400``) is not finite.
    """
    if not isinstance(value, (numbers.Real, np.bool_)):
        return None
    try:
        number = float(value)
    except (OverflowError, TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def describe(value: Any, limit: int = 60) -> str:
    """``type value`` for an error message, the value's repr cut to ``limit`` characters (an int of 400 digits stays readable)."""
    return f"{type(value).__name__} {short_repr(value, limit)}"


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, with the full length said (``1000…... (401 characters)``)."""
    text = repr(value)
    return f"{text[: limit - 20]}... ({len(text)} characters)" if len(text) > limit else text


def _first_unreadable(group: Any, g: int) -> str:
    """Where in ``group`` (a sequence) a value numpy cannot read as float64 sits, for the error message."""
    for t, value in enumerate(group):
        if as_finite_real(value) is None and not _is_tensor(value):
            return f"group {g}, trajectory {t}: reward must be a finite number, got {describe(value)}"
    return f"group {g}: rewards must be numbers"


def flatten_groups(rewards: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """List of per-group rewards -> (values float64 ``(N,)``, offsets ``(G + 1,)``).

    Raises ``ValueError`` naming the group and position of a missing, non-numeric or
    non-finite reward.
    """
    arrays = []
    for g, group in enumerate(rewards):
        try:
            arr = np.asarray(group, dtype=np.float64)
        except OverflowError:  # an int beyond the float64 range
            raise ValueError(_first_unreadable(group, g)) from None
        except (TypeError, ValueError, RuntimeError) as e:  # a bf16, requires_grad or GPU tensor: read its values
            if not _is_tensor(group) or group.is_complex():
                raise ValueError(f"group {g}: rewards must be numbers, got {group!r} ({e})") from None
            arr = group.detach().to(device="cpu").double().numpy()
        if arr.ndim != 1:
            raise ValueError(f"group {g}: rewards must be a 1-D sequence, got shape {arr.shape}")
        arrays.append(arr)
    offsets = offsets_from_sizes([a.size for a in arrays])
    values = np.concatenate(arrays) if arrays else np.zeros(0)
    if not np.isfinite(values).all():
        i = int(np.flatnonzero(~np.isfinite(values))[0])
        g = int(np.searchsorted(offsets, i, side="right") - 1)
        raise ValueError(f"group {g}, trajectory {i - offsets[g]}: reward is {values[i]}; rewards must be finite")
    return values, offsets


def check_call_options(func_name: str, kwargs: dict[str, Any], norm_source: str = "") -> None:
    """``norm_adv_by_std_in_grpo`` (when given, None included) must be a bool and ``epsilon`` a finite int or float >= 0.

    A str ``"false"`` is truthy and None falsy: either would silently pick a mode. ``norm_source`` says where
    the flag came from (``" (from algorithm_config)"``).
    """
    if "norm_adv_by_std_in_grpo" in kwargs:
        norm = kwargs["norm_adv_by_std_in_grpo"]
        if not isinstance(norm, (bool, np.bool_)):
            raise ValueError(f"{func_name}(): norm_adv_by_std_in_grpo{norm_source} must be a bool (True or False), got {type(norm).__name__} {norm!r}")
    if "epsilon" in kwargs:
        epsilon = kwargs["epsilon"]
        if not is_finite_real(epsilon) or epsilon < 0:
            raise ValueError(f"{func_name}(): epsilon must be a finite number >= 0, got {describe(epsilon)}")


def is_plain_real(value: Any) -> bool:
    """Whether ``value`` is an int or float numpy computes with (Python or numpy; not a bool, a ``Fraction`` or a ``Decimal``)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def is_finite_real(value: Any) -> bool:
    """Whether ``value`` is a plain real (:func:`is_plain_real`) that float64 holds: not NaN or inf, no int beyond the range (``10**400``)."""
    return is_plain_real(value) and as_finite_real(value) is not None
