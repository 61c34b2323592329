"""Deliberately wrong estimator plugins, each a mistake a plugin author makes: the conformance matrix must fail every one.

:data:`WRONG` maps a name to ``(spec, relations)``: the spec to register and the relations of the core paths that must
fail for it (at least one cell of each). Loaded by path from ``tests/conformance/test_wrong_plugins.py`` and
``integration_tests/conformance/test_matrix_adapter_paths.py`` (through ``rllm-plugins check NAME --paths``).
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

from rllm_plugins.spec import AdvEstimatorSpec
from rllm_plugins.state.schema import MapOf


def _centred(r) -> np.ndarray:
    r = np.asarray(r, dtype=np.float64)
    return r - r.mean() if r.size else r


def _pair(fn):
    """``fn`` returning its advantages as both advantages and returns (its signature kept: its options are read from it)."""

    @functools.wraps(fn)
    def list_form(rewards, **kwargs):
        out = fn(rewards, **kwargs)
        return out, out

    return list_form


@_pair
def raises_on_every_batch(rewards, **_):
    """Refuses every batch."""
    raise ValueError("this estimator refuses every group")


def small_groups_batched(values, offsets, **_):
    """r - mean per group, but r itself for groups of fewer than 4 trajectories."""
    out = np.array(values, dtype=np.float64)
    for g in range(len(offsets) - 1):
        part = out[offsets[g] : offsets[g + 1]]
        if part.size >= 4:
            out[offsets[g] : offsets[g + 1]] = part - part.mean()
    return out


@_pair
def centred(rewards, **_):
    """r - group mean."""
    return [_centred(r) for r in rewards]


@_pair
def first_group_special(rewards, **_):
    """r - mean, +1 for the first group of the batch."""
    return [_centred(r) + (g == 0) for g, r in enumerate(rewards)]


@_pair
def ignores_temperature(rewards, temperature: float = 1.0, **_):
    """Declares a temperature and never reads it."""
    return [_centred(r) for r in rewards]


def leaky_running_baseline(values, offsets, state, task_ids=None, **_):
    """A baseline per task, but one running mean over all rows of the batch is what each task keeps."""
    baselines = dict(state.get("task_baselines", {}))
    advantages = np.empty(len(values))
    running = 0.0
    for i, (reward, task) in enumerate(zip(np.asarray(values, dtype=np.float64).tolist(), task_ids, strict=True)):
        advantages[i] = reward - baselines.get(str(task), 0.0)
        running = 0.5 * running + 0.5 * reward
        baselines[str(task)] = running
    return advantages, {"task_baselines": baselines}


@_pair
def minus_max(rewards, **_):
    """r - the best reward of its group (the docs' max_baseline: a raw numpy error on an empty group)."""
    return [np.asarray(r, dtype=np.float64) - np.asarray(r, dtype=np.float64).max() for r in rewards]


@_pair
def by_position(rewards, **_):
    """r + its index in the group."""
    return [np.asarray(r, dtype=np.float64) + np.arange(len(r)) for r in rewards]


@_pair
def clipped(rewards, **_):
    """r - mean with rewards clipped at 1e20."""
    return [_centred(np.minimum(np.asarray(r, dtype=np.float64), 1e20)) for r in rewards]


@_pair
def no_epsilon(rewards, **_):
    """(r - mean) / std, without an epsilon: NaN for a group of equal rewards."""
    with np.errstate(all="ignore"):
        return [_centred(r) / np.asarray(r, dtype=np.float64).std() if len(r) else _centred(r) for r in rewards]


def half_list(rewards, **_):
    out = [np.asarray(r, dtype=np.float64) / 2 for r in rewards]
    return out, out


def whole_batched(values, offsets, **_):
    return np.asarray(values, dtype=np.float64)


def mutates_rewards(rewards, **_):
    """r - mean, computed in place on the caller's arrays."""
    for r in rewards:
        if len(r):
            r -= r.mean()
    return list(rewards), list(rewards)


_calls = itertools.count()


@_pair
def hidden_counter(rewards, **_):
    """r - mean + how many times it was called (a hidden module-level state)."""
    n = next(_calls)
    return [_centred(r) + n for r in rewards]


_hidden_baseline = {"b": 0.0}


def hidden_state_batched(values, offsets, state, **_):
    """Declares a state but keeps its baseline in a module global."""
    values = np.asarray(values, dtype=np.float64)
    advantages = values - _hidden_baseline["b"]
    _hidden_baseline["b"] = 0.9 * _hidden_baseline["b"] + 0.1 * float(values.mean() if values.size else 0.0)
    return advantages, {"baseline": _hidden_baseline["b"]}


def float32_state_batched(values, offsets, state, **_):
    """A running baseline kept as np.float32: owners keep it as a float, but it overflows past 3.4e38 (rewards x 1e150)."""
    values = np.asarray(values, dtype=np.float64)
    b = float(state.get("baseline", 0.0))
    new = np.float32(0.9 * b + 0.1 * (values.mean() if values.size else 0.0))
    return values - b, {"baseline": new}


@_pair
def one_short(rewards, **_):
    """Drops the last trajectory of every group."""
    return [_centred(r)[:-1] for r in rewards]


def step_by_position(rewards, step_rewards, anchors=None, **_):
    """A step-level estimator: each step's reward + the trajectory's index in its group."""
    advantages = [[np.asarray(s, dtype=np.float64) + i for i, s in enumerate(group)] for group in step_rewards]
    return advantages, advantages


@_pair
def reads_traj_groups(rewards, traj_groups=None, **_):
    """Reads the rewards from the rLLM objects, which only the collector passes."""
    return [_centred([t.reward for t in group.trajectories]) for group in traj_groups]


@_pair
def loo_unguarded(rewards, **_):
    """Leave-one-out baseline without the guard for a group of one (0/0)."""
    with np.errstate(all="ignore"):
        return [np.asarray(r, dtype=np.float64) - (np.sum(r) - np.asarray(r, dtype=np.float64)) / (len(r) - 1) for r in rewards]


_rng = np.random.default_rng(0)


@_pair
def noisy(rewards, **_):
    """r - mean + a little noise (not deterministic)."""
    return [_centred(r) + _rng.normal(0.0, 1e-3, len(r)) for r in rewards]


RAE_LIKE = {"baseline": float}

WRONG: dict[str, tuple[AdvEstimatorSpec, tuple[str, ...]]] = {
    spec.name: (spec, relations)
    for spec, relations in [
        (AdvEstimatorSpec("wrong_raises", fn=raises_on_every_batch), ("equals_collector", "permutation", "scale")),
        (AdvEstimatorSpec("wrong_small_groups", fn=centred, batched=small_groups_batched), ("equals_collector",)),
        (AdvEstimatorSpec("wrong_first_group", fn=first_group_special), ("permutation",)),
        (AdvEstimatorSpec("wrong_ignored_option", fn=ignores_temperature), ("option_sensitivity",)),
        (
            AdvEstimatorSpec("wrong_state_order", batched=leaky_running_baseline, stateful=True, state_schema={"task_baselines": MapOf(float)}),
            ("state_order",),
        ),
        (AdvEstimatorSpec("wrong_empty_group", fn=minus_max), ("equals_collector",)),
        (AdvEstimatorSpec("wrong_by_position", fn=by_position), ("permutation",)),
        (AdvEstimatorSpec("wrong_clipped", fn=clipped), ("scale",)),
        (AdvEstimatorSpec("wrong_no_epsilon", fn=no_epsilon), ("equals_collector",)),
        (AdvEstimatorSpec("wrong_two_forms", fn=half_list, batched=whole_batched), ("equals_collector",)),
        (AdvEstimatorSpec("wrong_mutates", fn=mutates_rewards), ("composite_linear",)),
        (AdvEstimatorSpec("wrong_hidden_counter", fn=hidden_counter), ("equals_collector",)),
        (AdvEstimatorSpec("wrong_hidden_state", batched=hidden_state_batched, stateful=True, state_schema=RAE_LIKE), ("state_roundtrip",)),
        (AdvEstimatorSpec("wrong_float32_state", batched=float32_state_batched, stateful=True), ("scale",)),
        (AdvEstimatorSpec("wrong_one_short", fn=one_short), ("equals_collector",)),
        (AdvEstimatorSpec("wrong_step_position", fn=step_by_position, level="step"), ("permutation",)),
        (AdvEstimatorSpec("wrong_traj_groups", fn=reads_traj_groups), ("equals_collector",)),
        (AdvEstimatorSpec("wrong_group_of_one", fn=loo_unguarded), ("equals_collector",)),
        (AdvEstimatorSpec("wrong_noisy", fn=noisy), ("equals_collector",)),
    ]
}
