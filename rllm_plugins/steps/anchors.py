"""Anchor groups: ids from anchor states, and values normalised within them.

An anchor state is what the agent observed when it acted (GiGPO, arXiv 2505.10978, section 4.2):
steps of one task group, of any trajectory and any turn, that saw an equal (``==``) state form one
anchor group, whose members' returns are compared with each other. Equal states in different task
groups never meet.

States are grouped by value: an array or a tensor counts as the tuple of its values (``.tolist()``,
nested tuples for more dimensions), so ``torch.tensor([1, 2])``, ``np.array([1, 2])`` and ``(1, 2)``
are one state. Refused, naming the step: a NaN state (NaN equals nothing, not even itself), None (no
state), and an object whose ``==`` compares values while its hash is its identity (equal states would
never meet).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence

import numpy as np

from ..scaled import scaled_standardize
from ..segments import GroupLayout

__all__ = ["TokenIds", "anchor_ids", "is_hashable", "normalize_within"]


class TokenIds(bytes):
    """Token ids as an anchor state: the bytes of their int64 values, so hashed and compared as bytes (one C call).

    Similarity grouping (:mod:`rllm_plugins.steps.similarity`) reads it as the sequence of ids (:meth:`ids`),
    not as bytes: two states sharing no token share no element.
    """

    __slots__ = ()

    @classmethod
    def of(cls, ids: np.ndarray) -> TokenIds:
        """The state of ``ids`` ``(L,)`` of any integer dtype."""
        return cls(np.asarray(ids).astype(np.int64, copy=False).tobytes())

    def ids(self) -> tuple[int, ...]:
        """The token ids ``(L,)``, as a tuple of ints."""
        return tuple(np.frombuffer(self, dtype=np.int64).tolist())


_TABLE_SPAN = 16  # anchor_ids renumbers through a table while the key span is at most this many times the steps (else sorts)


def anchor_ids(states: Sequence[Hashable], step_group: Sequence[int] | np.ndarray, where: Callable[[int], str], codes: np.ndarray | None = None) -> np.ndarray:
    """One anchor-group id per step ``(S,)`` int64, dense from 0: equal ``(task group, state)`` pairs share an id.

    ``where(s)`` names step ``s`` in the error raised for a refused state (unhashable, NaN, None; see the module docstring).
    States are coded once (one dict lookup per step), then combined with their group in numpy. ``codes`` ``(S,)`` int64
    >= 0, equal exactly where the states are equal (as :func:`~rllm_plugins.steps.turns.turn_anchor_codes` gives them):
    the states are taken as coded, not hashed; the ids are those the states would give.
    """
    if codes is not None:
        state_codes, distinct = _by_first_appearance(np.asarray(codes, dtype=np.int64))
    else:
        state_codes, distinct = _state_codes(states, where)
    groups = np.asarray(step_group if isinstance(step_group, np.ndarray) else list(step_group), dtype=np.int64)
    if groups.shape != state_codes.shape:
        raise ValueError(f"anchor_ids: {state_codes.size} states for {groups.size} step groups")
    if state_codes.size == 0:
        return state_codes
    keys = groups * distinct + state_codes
    span = int(keys.max()) + 1
    if span <= _TABLE_SPAN * keys.size:  # keys dense enough: renumber through a table (1 + 4 bytes per key value), no sort
        present = np.zeros(span, dtype=bool)
        present[keys] = True
        renumber = np.cumsum(present, dtype=np.int32 if span < 2**31 else np.int64)  # int32's running sum: 5x int64's speed
        ids = renumber[keys].astype(np.int64)
        ids -= 1
        return ids
    _, ids = np.unique(keys, return_inverse=True)
    return ids.astype(np.int64, copy=False).reshape(-1)


def _state_codes(states: Sequence[Hashable], where: Callable[[int], str]) -> tuple[np.ndarray, int]:
    """``(S,)`` int64 code of each state, dense from 0 in order of first appearance (equal states, one code), and their number."""
    codes: dict[Hashable, int] = {}
    try:
        state_codes = np.fromiter((codes.setdefault(state, len(codes)) for state in states), dtype=np.int64)
        by_value = _hashed_by_value(codes)  # only the distinct states are looked at
    except TypeError:  # an unhashable state (or an array): look at each
        by_value = False
    if not by_value:
        codes = {}
        state_codes = np.fromiter((codes.setdefault(key, len(codes)) for key in _value_keys(states, where)), dtype=np.int64)
    return state_codes, len(codes)


def _by_first_appearance(codes: np.ndarray) -> tuple[np.ndarray, int]:
    """``codes`` ``(S,)`` renumbered dense from 0 in order of first appearance (as :func:`_state_codes` numbers states), and their number."""
    if codes.size == 0:
        return codes, 0
    if codes.ndim != 1 or int(codes.min()) < 0:
        raise ValueError(f"anchor_ids: codes must be a 1-D array of integers >= 0, got shape {codes.shape}")
    highest = np.maximum.accumulate(codes)
    if codes[0] == 0 and (highest[1:] - highest[:-1] <= 1).all():  # already so numbered (each new code one above the last)
        return codes, int(highest[-1]) + 1
    distinct, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    rank = np.empty(distinct.size, dtype=np.int64)
    rank[np.argsort(first)] = np.arange(distinct.size)
    return rank[inverse.reshape(-1)], distinct.size


_VALUE_HASHED = frozenset({str, bytes, TokenIds, int, bool, tuple, frozenset})
"""Types whose hash follows their value and that hold no NaN at the top level: their states are taken as they are."""


_HASHABLE = "(a str, a number, a tuple of token ids, bytes)"
_NUMBERS = (float, np.integer, np.floating)


def _hashed_by_value(distinct: Mapping[Hashable, int]) -> bool:
    """Whether the distinct states are all of :data:`_VALUE_HASHED` types or numbers other than NaN (the common case, checked in C)."""
    kinds = set(map(type, distinct))
    if kinds <= _VALUE_HASHED:
        return True
    if not all(issubclass(kind, _NUMBERS) for kind in kinds - _VALUE_HASHED):
        return False
    return all(state == state for state in distinct if isinstance(state, (float, np.floating)))


def _is_array(state: object) -> bool:
    """An array or a tensor (not a numpy scalar): compared element-wise by ``==``, so grouped by its values."""
    return hasattr(state, "tolist") and hasattr(state, "shape") and not isinstance(state, np.generic)


def _frozen(values: object) -> Hashable:
    """``.tolist()`` output as nested tuples (a scalar as itself)."""
    return tuple(_frozen(v) for v in values) if isinstance(values, list) else values  # type: ignore[return-value]


def _has_nan(key: object) -> bool:
    if isinstance(key, tuple):
        return any(_has_nan(v) for v in key)
    return isinstance(key, (float, np.floating)) and key != key


def _value_keys(states: Sequence[object], where: Callable[[int], str]) -> list[Hashable]:
    """One key per state that groups equal states (see the module docstring); ``ValueError`` naming the step of a refused one."""
    keys: list[Hashable] = []
    for s, state in enumerate(states):
        kind = type(state)
        if kind in _VALUE_HASHED:
            keys.append(state)  # type: ignore[arg-type]
            continue
        if state is None:
            raise ValueError(f"{where(s)}: anchor state is None, which means no state; give every step a state (any hashable)")
        key = _frozen(state.tolist()) if _is_array(state) else state  # type: ignore[attr-defined]
        if _has_nan(key):
            raise ValueError(f"{where(s)}: anchor state {kind.__name__} {_short(state)} is or holds NaN, which equals nothing; give a state without NaN")
        if not _is_array(state):
            if not is_hashable(state):
                raise ValueError(f"{where(s)}: anchor state {kind.__name__} {_short(state)} is unhashable; give a hashable one {_HASHABLE}")
            if kind.__hash__ is object.__hash__ and kind.__eq__ is not object.__eq__:
                raise ValueError(
                    f"{where(s)}: anchor state {kind.__name__} {_short(state)} compares by value (==) but hashes by identity, so equal states "
                    "would never meet; give its value as a hashable (a tuple, a str, bytes)"
                )
        keys.append(key)
    return keys


def is_hashable(value: object) -> bool:
    """Whether ``hash(value)`` works (an anchor state or an id must be hashable)."""
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def normalize_within(values: np.ndarray, ids: np.ndarray, *, norm_adv_by_std_in_grpo: bool, epsilon: float, ddof: int = 0) -> np.ndarray:
    """``(v - mean) / (std + eps)`` within each id group (``v - mean`` without std); a group of one gets 0.

    ``values`` ``(S,)`` float64, ``ids`` ``(S,)`` int64 >= 0. The std has ``ddof`` (0: population).
    The mean takes one correction pass, so a group of equal values gets exactly 0.
    """
    if values.size == 0:
        return np.zeros(0)
    counts = np.bincount(ids)
    with np.errstate(over="ignore", invalid="ignore"):
        mean = np.bincount(ids, values, minlength=counts.size) / np.maximum(counts, 1)
        mean += np.bincount(ids, values - mean[ids], minlength=counts.size) / np.maximum(counts, 1)
        centred = values - mean[ids]
        var = np.bincount(ids, centred * centred, minlength=counts.size) / np.maximum(counts - ddof, 1)
    if not (np.isfinite(mean).all() and np.isfinite(var).all()):  # magnitudes near the float64 range: the overflow-safe path
        return _normalize_sorted(values, ids, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, epsilon=epsilon, ddof=ddof)
    single = (counts <= 1)[ids]
    centred[single] = 0.0
    if norm_adv_by_std_in_grpo:
        centred /= _divisor(np.sqrt(var), epsilon)[ids]
    return centred


def _divisor(std: np.ndarray, epsilon: float) -> np.ndarray:
    """``std + epsilon``; with ``epsilon`` 0 a group without spread divides by inf, so its equal values get 0 (not 0 / 0)."""
    divisor = std + epsilon
    return divisor if epsilon > 0 else np.where(divisor > 0, divisor, np.inf)


def _normalize_sorted(values: np.ndarray, ids: np.ndarray, *, norm_adv_by_std_in_grpo: bool, epsilon: float, ddof: int) -> np.ndarray:
    """:func:`normalize_within` on values sorted by id: the overflow-safe mean, and the std scaled (:mod:`rllm_plugins.scaled`)."""
    order = np.argsort(ids, kind="stable")
    counts = np.bincount(ids)
    layout = GroupLayout.from_offsets(np.concatenate(([0], np.cumsum(counts))), values.size)
    ordered = values[order]
    if norm_adv_by_std_in_grpo:
        centred = scaled_standardize(layout, ordered, epsilon=epsilon, ddof=ddof, single="zero")
    else:
        with np.errstate(over="ignore"):  # a deviation beyond the range stays inf, refused where the advantages are checked
            centred = ordered - layout.expand(layout.mean(ordered))
        centred[layout.expand(layout.sizes <= 1)] = 0.0
    out = np.empty_like(centred)
    out[order] = centred
    return out
