"""A configuration's list of transforms, resolved and checked at config time.

An entry is ``"name"``, ``("name", {options})`` or ``{"name": ..., **options}``; the list is applied in
order. A JSON string holding such a list is read too (command lines). Unknown names, unknown options and
option values a transform refuses raise ``ValueError`` naming the entry, before any training step.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import set_transform_resolver
from ..transform_spec import Transform, transform_context, transform_options
from .registry import get_transform

_EMPTY = inspect.Parameter.empty

__all__ = [
    "SelectedTransform",
    "check_available_context",
    "entry_list",
    "narrow_dtype",
    "narrow_dtype_message",
    "resolve_transforms",
    "split_chain",
    "split_entry",
    "trial_call",
    "trial_context",
]


@dataclass(frozen=True)
class SelectedTransform:
    """One entry of the list: the transform, its options, and its label in the metrics (``name``, ``name#2`` when repeated)."""

    transform: Transform
    options: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""

    @property
    def name(self) -> str:
        return self.transform.spec.name


def split_entry(entry: Any, where: str, kind: str = "transform") -> tuple[str, dict[str, Any]]:
    """``(name, options)`` of one entry of a list of transforms (or of another plugin kind: ``kind`` names it in errors)."""
    if isinstance(entry, str):
        return entry, {}
    if isinstance(entry, Mapping):
        if "name" not in entry:
            raise ValueError(f"{where}: a mapping entry needs a 'name' key (the {kind}'s name), got {dict(entry)!r}")
        options = {str(k): v for k, v in entry.items() if k != "name"}
        return entry["name"], options
    if isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[0], str) and isinstance(entry[1], Mapping):
        return entry[0], {str(k): v for k, v in entry[1].items()}
    raise ValueError(f"{where}: an entry is 'name', ('name', {{options}}) or {{'name': ..., **options}}, got {entry!r}")


def entry_list(entries: Any, where: str, kind: str = "transform") -> Sequence[Any]:
    """``entries`` as a list of entries: a list as it is, a JSON string holding one (command lines) or one name read."""
    if isinstance(entries, str):
        import json  # only for entries given as text: not paid by `import rllm_plugins`

        try:
            entries = json.loads(entries) if entries.strip().startswith("[") else [entries]
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: not a JSON list of {kind}s: {e}") from None
    if isinstance(entries, (str, bytes, Mapping)) or not isinstance(entries, Sequence):
        raise ValueError(f"{where} must be a list of {kind}s ('name', ('name', {{options}}) or {{'name': ..., **options}}), got {entries!r}")
    return entries


def trial_context(level: str) -> dict[str, Any]:
    """A small input of every context keyword, for the config-time trial call (two groups of two units; a (2, 3) token batch)."""
    if level == "token":
        mask = np.array([[1, 1, 0], [1, 1, 1]], dtype=np.float64)
        return {"mask": mask, "logprobs": np.full((2, 3), -1.0), "ref_logprobs": np.full((2, 3), -1.2), "role": "all_groups"}
    return {
        "offsets": np.array([0, 2, 4]),
        "rewards": np.array([1.0, 0.0, 0.5, 0.25]),
        "scores": np.array([1.0, 0.0, 0.5, 0.25]),
        "lengths": np.array([3.0, 5.0, 2.0, 4.0]),
        "mean_logprobs": np.array([-0.5, -1.0, -0.25, -2.0]),
        "turn_index": np.zeros(4, dtype=np.int64),
        "traj_offsets": np.arange(5),
        "role": "all_groups",
    }


def narrow_dtype(result: Any) -> str | None:
    """The name of ``result``'s dtype where it holds less than float32 does (float16, bfloat16, an integer, bool or object
    type); None for float32 and wider. A list or a scalar is read as numpy reads it."""
    dtype = getattr(result, "dtype", None)
    if dtype is None:
        try:
            dtype = np.asarray(result).dtype
        except (ValueError, TypeError):
            return None  # not an array at all: the shape check says so
    if isinstance(getattr(dtype, "is_floating_point", None), bool):  # a torch dtype
        return None if dtype.is_floating_point and dtype.itemsize >= 4 else str(dtype)
    try:
        kind, size = np.dtype(dtype).kind, np.dtype(dtype).itemsize
    except TypeError:
        return str(dtype)
    return None if kind == "f" and size >= 4 else str(np.dtype(dtype))


def narrow_dtype_message(who: str, dtype: str) -> str:
    """What a transform that returned ``dtype`` (:func:`narrow_dtype`) is told, on every path and by ``rllm-plugins check``."""
    return (
        f"{who} returned advantages of dtype {dtype}, which holds less than float32 (float16 turns 1.7320508 into 1.732421875): "
        "return float64 or the input's dtype"
    )


def resolve_transforms(entries: Any, where: str, *, trial: bool = True) -> tuple[SelectedTransform, ...]:
    """The transforms ``entries`` selects, checked: names known, options known, each tried once on a small input (``trial``)."""
    if entries is None:
        return ()
    entries = entry_list(entries, where)
    selected: list[SelectedTransform] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        here = f"{where}[{i}]"
        name, options = split_entry(entry, here)
        try:
            transform = get_transform(name)
        except ValueError as e:
            raise ValueError(f"{here}: {e}") from None
        known = transform_options(transform.spec)
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ValueError(
                f"{here}: advantage transform {transform.spec.name!r} ({transform.provider}) has no option(s) {unknown}; "
                f"its options: {', '.join(known) if known else 'none'}"
            )
        missing = sorted(k for k, default in known.items() if default is _EMPTY and k not in options)
        if missing:
            raise ValueError(f"{here}: advantage transform {transform.spec.name!r} needs the option(s) {missing}")
        seen[transform.spec.name] = seen.get(transform.spec.name, 0) + 1
        label = transform.spec.name if seen[transform.spec.name] == 1 else f"{transform.spec.name}#{seen[transform.spec.name]}"
        choice = SelectedTransform(transform, dict(options), label)
        if trial:
            _trial(choice, here)
        selected.append(choice)
    return tuple(selected)


def trial_call(choice: SelectedTransform, where: str, *, writable: bool = False) -> Any:
    """Call the transform once on a small input and return what it returned: option values it refuses raise ``ValueError``.
    The advantages are read-only unless ``writable`` (the contract check hands a writable copy and reports a change)."""
    spec = choice.transform.spec
    context = trial_context(spec.level)
    named = transform_context(spec)
    advantages = np.array([[0.5, -1.0, 0.0], [1.5, -0.25, 2.0]]) if spec.level == "token" else np.array([0.5, -1.0, 0.0, 1.5])
    advantages.flags.writeable = writable
    try:
        return spec.fn(advantages, **choice.options, **{k: v for k, v in context.items() if k in named})
    except (ValueError, TypeError) as e:
        who = f"advantage transform {spec.name!r} ({choice.transform.provider})"
        raise ValueError(f"{where}: {who} fails on a small input with the options {dict(choice.options)}: {e}") from None


def _trial(choice: SelectedTransform, where: str) -> None:
    """Call the transform once on a small input, so that option values it refuses, and advantages it returns in less than
    float32, fail at config time."""
    dtype = narrow_dtype(trial_call(choice, where))
    if dtype is not None:
        raise ValueError(f"{where}: " + narrow_dtype_message(f"advantage transform {choice.name!r} ({choice.transform.provider})", dtype))


def check_available_context(selected: Sequence[SelectedTransform], available: set[str], where: str, framework: str) -> None:
    """Refuse, at config time, a transform that requires a context keyword ``framework`` cannot give (``available``)."""
    for choice in selected:
        missing = [k for k in choice.transform.spec.requires if k not in available]
        if missing:
            raise ValueError(
                f"{where}: advantage transform {choice.name!r} needs {missing}, which {framework} does not provide here "
                f"(it provides: {', '.join(sorted(available)) or 'nothing'})"
            )


def split_chain(selected: Sequence[SelectedTransform]) -> tuple[tuple[SelectedTransform, ...], tuple[SelectedTransform, ...]]:
    """``(unit part, token part)``: the transforms before the first token-level one, and it with the rest.

    Every path runs the unit part inside the estimator's run, on one value per unit (trajectory, session or step),
    and the token part on its own rows' ``(B, T)`` advantages, where the token log-probs are."""
    first = next((i for i, c in enumerate(selected) if c.transform.spec.level == "token"), len(selected))
    return tuple(selected[:first]), tuple(selected[first:])


set_transform_resolver(resolve_transforms)
