"""The paths ``rllm-plugins bench`` times an estimator on: the core's, and those the adapters contribute.

A :class:`BenchPath` prepares a :class:`~rllm_plugins.bench.batch.BenchBatch` once for a dtype and a device (its
framework's own inputs: verl's ``DataProto``), then hands one :class:`Row` per estimator: the call that is timed, and its
output as the bench compares it with the collector (``layout`` ``"tokens"``: ``(B, T)``; ``"steps"``: one per step).
An adapter contributes its paths through the entry-point group :data:`PATHS_GROUP` (``name = "module:function"``,
``function() -> list[BenchPath]``), so the core never imports an adapter or a framework.

The core's path, ``core``, is the estimator's batched form on the batch's flat values (one per trajectory, or a
:class:`~rllm_plugins.steps.batch.StepBatch` of its turns), its inputs built before the timing, the advantage transforms
after it on the same units as the collector's: what an adapter calls, without a framework around it. It runs on the
CPU, in float64 whatever the rewards' dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import metadata
from typing import Any, Protocol

import numpy as np

from ..calling import call_with_accepted_kwargs
from ..config import AlgorithmConfig
from ..needs import needs_of
from ..registry import get_estimator
from ..segments import offsets_from_sizes
from ..steps.forms import batch_from_lists, split_step_output
from ..testing.matrix.paths import _critic_inputs, _outcome_inputs, _per_step, _step_inputs, _units
from .batch import BenchBatch

__all__ = ["CORE", "PATHS_GROUP", "BenchPath", "Prepared", "Row", "Setting", "available_paths"]

PATHS_GROUP = "rllm_plugins.bench_paths"
Transforms = Sequence[tuple[str, Mapping[str, Any]]]


@dataclass(frozen=True)
class Setting:
    """What the batch is prepared as: the token rewards' ``dtype`` (a torch dtype's name) and the ``device`` (``cpu``, ``cuda``, ``cuda:1``)."""

    dtype: str = "float32"
    device: str = "cpu"


@dataclass(frozen=True)
class Row:
    """One estimator on one prepared path.

    ``call()``: the call that is timed (inputs built before); ``output()``: one call from a fresh state (a stateful
    estimator's memory cleared), its advantages as float64 numpy in the path's layout; ``tensors()``: after a call,
    the ``(B, T)`` tensors to count passes over (``rewards``, ``mask``, ``output``), None where the path has none.
    """

    call: Callable[[], object]
    output: Callable[[], np.ndarray]
    tensors: Callable[[], dict[str, Any]] | None = None


class Prepared(Protocol):
    """A path prepared for one batch and setting."""

    sync: Callable[[], None] | None  # the device's synchronisation (timed inside each call), None on the CPU

    def row(self, name: str, options: Mapping[str, Any], transforms: Transforms, own: bool) -> Row:
        """The row of ``name`` (the framework's own estimator when ``own``) with ``options`` and ``transforms`` after it."""
        ...


@dataclass(frozen=True)
class BenchPath:
    """One way of computing advantages the bench times (see the module docstring).

    ``own`` maps the framework's own estimators the path runs to the registered estimator whose collector output each
    must equal (verl's ``grpo`` to ``verl_grpo``); ``devices`` the device types it runs on; ``dtypes`` the reward dtypes.
    """

    name: str
    framework: str
    description: str
    layout: str  # "tokens" or "steps"
    prepare: Callable[[BenchBatch, Setting], Prepared]
    own: Mapping[str, str] = field(default_factory=dict)
    own_default: tuple[str, ...] = ()  # the framework's own estimators shown when none is named
    devices: tuple[str, ...] = ("cpu",)
    dtypes: tuple[str, ...] = ("float32", "float64", "bfloat16", "float16")
    precision: str | None = None  # the float type it computes in whatever the rewards' dtype (None: theirs): the gate's tolerance
    own_precision: str | None = None  # the narrowest float type the framework's own estimators compute in, if narrower than the rewards'

    def own_label(self, name: str) -> str:
        return f"{self.framework}:{name}"


class _CorePrepared:
    sync = None

    def __init__(self, batch: BenchBatch) -> None:
        self.batch = batch
        sample = batch.sample
        self.rewards, self.lengths, self.task_ids = _outcome_inputs(sample)
        self.values = np.concatenate(self.rewards)
        self.offsets = offsets_from_sizes([r.size for r in self.rewards])
        self.step_inputs = _step_inputs(sample)
        self.starts, self.context = _units(sample)
        self._steps: dict[tuple[bool, bool], Any] = {}

    def _step_batch(self, values: bool, lengths: bool) -> Any:
        if (values, lengths) not in self._steps:
            batch = batch_from_lists(*self.step_inputs, **(_critic_inputs(self.batch.sample) if values else {}))
            self._steps[values, lengths] = replace(batch, lengths=self.lengths) if lengths else batch
        return self._steps[values, lengths]

    def row(self, name: str, options: Mapping[str, Any], transforms: Transforms, own: bool) -> Row:
        spec = get_estimator(name).spec
        needs = needs_of(spec, options)
        given = {**options, "norm_adv_by_std_in_grpo": True}
        sample = self.batch.sample
        entries = [(n, dict(o)) for n, o in transforms]
        if spec.level == "step":
            batch = self._step_batch(needs.values, needs.lengths)
            config = AlgorithmConfig(estimator=name)
            extra: dict[str, Any] = {"state": {}, "task_ids": self.task_ids} if needs.state else {}

            def compute() -> np.ndarray:
                result = call_with_accepted_kwargs(spec.batched_form, batch, algorithm_config=config, **extra, **given)
                result = result[0] if needs.state else result
                advantages, _ = split_step_output(result, needs.values, batch.num_steps, f"estimator {name!r}")
                return self._transformed(np.asarray(advantages, dtype=np.float64), entries)

        else:
            extra = {"state": {}, "task_ids": self.task_ids} if spec.stateful else {}

            def compute() -> np.ndarray:
                result = call_with_accepted_kwargs(spec.batched_form, self.values, self.offsets, lengths=self.lengths, **extra, **given)
                result = result[0] if spec.stateful else result
                return _per_step(sample, self._transformed(np.asarray(result, dtype=np.float64), entries, per_step=False))

        return Row(compute, compute)

    def _transformed(self, advantages: np.ndarray, entries: list[tuple[str, dict[str, Any]]], per_step: bool = True) -> np.ndarray:
        """``advantages`` (one per unit: step, or trajectory when not ``per_step``) through the transforms, with the context the
        collector hands them."""
        if not entries:
            return advantages
        from ..transforms import apply_transforms

        if per_step:
            out, _ = apply_transforms(advantages, entries, **self.context)
            return out
        sample = self.batch.sample
        trajectories = [t for g in sample.groups for t in g]
        context = {
            "offsets": offsets_from_sizes([len(g) for g in sample.groups]),
            "rewards": self.values,
            "scores": self.values,
            "lengths": self.lengths,
            "turn_index": np.zeros(len(trajectories), dtype=np.int64),
            "traj_offsets": np.arange(len(trajectories) + 1, dtype=np.int64),
        }
        out, _ = apply_transforms(advantages, entries, **context)
        return out


CORE = BenchPath(
    "core",
    "core",
    "the estimator's batched form on flat values (one per trajectory, or a StepBatch of the turns), then the transforms",
    "steps",
    lambda batch, setting: _CorePrepared(batch),
    devices=("cpu",),
    precision="float64",
)


def available_paths() -> dict[str, BenchPath | str]:
    """Every path by name: the core's, then each adapter's; an adapter whose framework is missing gives, instead, why none."""
    paths: dict[str, BenchPath | str] = {CORE.name: CORE}
    for ep in sorted(metadata.entry_points(group=PATHS_GROUP), key=lambda ep: ep.name):
        try:
            contributed = ep.load()()
        except ModuleNotFoundError as error:  # the adapter's framework is not installed; a module of the adapter's own is a bug
            if error.name is None or error.name.split(".")[0] == ep.module.split(".")[0]:
                raise
            paths[ep.name] = f"not available: {error}"
            continue
        for path in contributed:
            paths[path.name] = path
    return paths
