"""The estimator table of the conformance matrix: every registered estimator, with sample options and inputs.

One :class:`EstimatorEntry` per registered estimator (built-ins and installed plugins, aliases folded in),
read from the registry, so a new estimator joins the matrix by being installed: its sample options are
``{}`` and its inputs the generic ones of its level. A built-in that needs more says so in
:data:`SAMPLES` (options, 0/1 rewards, options that are numbers but default to None).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ...options import spec_options
from ...registry import available_estimators, get_estimator
from ...spec import AdvEstimatorSpec
from .samples import Sample, generate

__all__ = ["SAMPLES", "EstimatorEntry", "SampleSettings", "entry_of", "estimator_table"]

GROUP_SIZES = (0, 1, 2, 3, 4, 5, 6, 7, 8)  # 0: an empty group (GDPO's, where no member has a reward key), where the spec allows it


@dataclass(frozen=True)
class SampleSettings:
    """What a built-in needs beyond the generic inputs: ``options``, 0/1 ``binary`` rewards, ``numeric`` options defaulting to None."""

    options: Mapping[str, Any] = field(default_factory=dict)
    binary: bool = False
    numeric: tuple[str, ...] = ()


SAMPLES: Mapping[str, SampleSettings] = MappingProxyType(
    {
        "composite": SampleSettings({"terms": [["grpo", 0.5], ["gigpo", 0.5]]}, numeric=("gamma",)),  # gigpo: a term that discounts (gamma)
        "gigpo": SampleSettings(numeric=("anchor_similarity",)),
        "grpo_passk": SampleSettings(binary=True),
        "maxrl": SampleSettings(binary=True),
        "passk_training": SampleSettings({"k": 2}, binary=True),
        "pkpo": SampleSettings({"k": 2}, binary=True, numeric=("k",)),
        "step_reinforce": SampleSettings(numeric=("min_std",)),
        "turn_gae": SampleSettings({"gamma": 0.9, "lam": 0.8}),  # lam < 1: the returns depend on the critic's values too
    }
)


@dataclass(frozen=True)
class EstimatorEntry:
    """One row of the estimator table: ``name``, its ``spec``, the ``options`` of every call and its sample inputs."""

    name: str
    spec: AdvEstimatorSpec
    provider: str
    options: Mapping[str, Any]
    binary: bool
    numeric_options: tuple[str, ...]
    sizes: tuple[int, ...]

    @property
    def level(self) -> str:
        return self.spec.level

    @property
    def breaks(self) -> Mapping[str, str]:
        """The relations the estimator's spec declares it breaks, relation -> reason."""
        return self.spec.breaks

    def sample(self, seed: int) -> Sample:
        """The sample inputs of ``seed``: one task group of every size the estimator accepts with its options, in an order of ``seed``."""
        return generate(seed, self.level, self.sizes, binary=self.binary)


def _numeric(defaults: Mapping[str, Any], extra: tuple[str, ...]) -> tuple[str, ...]:
    named = [k for k, v in defaults.items() if isinstance(v, numbers.Real) and not isinstance(v, bool)]
    return tuple(dict.fromkeys([*named, *extra]))


def _sizes(spec: AdvEstimatorSpec, options: Mapping[str, Any]) -> tuple[int, ...]:
    """The group sizes ``check_group_size`` accepts with ``options`` (all of :data:`GROUP_SIZES` without one; 0 is an empty group)."""
    if spec.check_group_size is None:
        return GROUP_SIZES
    accepted = []
    for size in GROUP_SIZES:
        try:
            spec.check_group_size(options, size)
        except ValueError:
            continue
        accepted.append(size)
    return tuple(accepted)


def entry_of(name: str) -> EstimatorEntry:
    """The table entry of the registered estimator ``name`` (an alias gives its estimator's entry)."""
    estimator = get_estimator(name)
    spec = estimator.spec
    settings = SAMPLES.get(spec.name, SampleSettings()) if estimator.provider.kind == "builtin" else SampleSettings()
    options = dict(settings.options)
    sizes = _sizes(spec, options)
    if not [size for size in sizes if size]:
        raise ValueError(f"estimator {spec.name!r} accepts no group size of {list(GROUP_SIZES)} with options {options}; give sample options")
    numeric = _numeric(spec_options(spec).defaults, settings.numeric)
    return EstimatorEntry(spec.name, spec, str(estimator.provider), MappingProxyType(options), settings.binary, numeric, sizes)


def estimator_table() -> list[EstimatorEntry]:
    """Every registered estimator once (aliases folded in), sorted by name."""
    entries: dict[str, EstimatorEntry] = {}
    for name in available_estimators():
        spec_name = get_estimator(name).spec.name
        if spec_name not in entries:
            entries[spec_name] = entry_of(spec_name)
    return [entries[name] for name in sorted(entries)]
