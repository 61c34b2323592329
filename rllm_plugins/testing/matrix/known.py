"""Known failures of the conformance matrix: cells that fail today for a known reason, until that is fixed.

Keyed by ``(estimator, path, relation)``, the value says the reason in one line. A cell listed here that
fails is reported as ``known``; once the fix lands the cell passes and its entry should go. A failure an
estimator has on purpose is no known failure: its spec declares it (``AdvEstimatorSpec.breaks``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["KNOWN_FAILURES"]

KNOWN_FAILURES: Mapping[tuple[str, str, str], str] = MappingProxyType(
    {
        ("gigpo", "verl_step_bridge", "option_sensitivity"): (
            "with anchor_similarity, verl's legacy trainer visits a task group's episodes in the order of their anchor states "
            "(rllm_verl.compute.order: its rows carry no rollout index), the collector in trajectory order; greedy similarity "
            "clusters depend on that order"
        ),
    }
)
