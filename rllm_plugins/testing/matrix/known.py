"""Known failures of the conformance matrix: cells that fail today for a known reason, until that is fixed.

Keyed by ``(estimator, path, relation)``, the value says the reason in one line. A cell listed here that
fails is reported as ``known``; once the fix lands the cell passes and its entry should go. A failure an
estimator has on purpose is no known failure: its spec declares it (``AdvEstimatorSpec.breaks``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import product
from types import MappingProxyType

__all__ = ["KNOWN_FAILURES"]

HUGE_OPTIONS = "an option given as 10**400 raises a raw OverflowError (a huge int k is accepted) instead of a ValueError naming the option"
PADDING_STATISTICS = "verl rows without model tokens (padding) enter role-level statistics and move the real rows"
PADDING_STATE = "verl rows without model tokens (padding) update rllm_rae's running baseline"
RAE_V1 = "rllm_rae on verl's v1 path raises a raw TypeError (no state passed)"
STATEFUL_TERM = "a stateful term (rae) passes composite's config check, then raises a raw TypeError (no state passed)"
ANCHORED_TERM = "composite refuses a term that reads anchor states (gigpo) instead of running it"
LENGTH_TERM = "a length-based term passes composite's config check, then fails at run time: composite gives its terms no lengths"

TURN_GRPO_HUGE = "turn_grpo (ended='absorbing') with step rewards of ~1e155 and more silently drops the per-turn part (its variance overflows)"
PKPO_ROUNDING = "pkpo's credit carries a rounding error of ~1e-16 x the reward scale: tied rewards differ by ~1e-6 at rewards of 1e10"

CORE_FORMS = ("collector", "list_form", "batched_form")
CORE_PATHS = (*CORE_FORMS, "composite_term", "per_role_map")
LENGTH_BASED = ("minus_length_weighted_mean", "opo", "verl_reinforce_plus_plus_baseline")


def _cells(reason: str, estimators: Iterable[str], paths: Iterable[str], relations: Iterable[str]) -> dict[tuple[str, str, str], str]:
    return {key: reason for key in product(estimators, paths, relations)}


KNOWN_FAILURES: Mapping[tuple[str, str, str], str] = MappingProxyType(
    {
        **_cells(
            HUGE_OPTIONS,
            (
                "echo",
                "gpg",
                "grpo",
                "grpo_passk",
                "prpo",
                "prpo_std_optional",
                "rae",
                "reinforce_plus_plus_baseline",
                "trl_grpo",
                "trl_grpo_batch",
                "verl_grpo",
            ),
            ("collector", "trl_outcome", "verl_legacy", "verl_v1"),
            ("hostile_options",),
        ),
        **_cells(
            HUGE_OPTIONS, ("composite", "gigpo", "step_reinforce", "turn_grpo"), ("collector", "trl_turn", "verl_step_bridge", "verl_v1"), ("hostile_options",)
        ),
        **_cells(HUGE_OPTIONS, ("passk_training", "pkpo"), ("collector", "trl_outcome", "verl_legacy", "verl_v1"), ("hostile_options",)),
        **_cells(
            PADDING_STATISTICS,
            ("gpg", "prpo", "prpo_std_optional", "reinforce_plus_plus_baseline", "trl_grpo_batch"),
            ("verl_legacy", "verl_v1"),
            ("no_token_rows",),
        ),
        **_cells(TURN_GRPO_HUGE, ("turn_grpo",), CORE_PATHS, ("scale",)),
        **_cells(PKPO_ROUNDING, ("pkpo",), (*CORE_PATHS, "gdpo_one_key", "trl_outcome", "verl_legacy", "verl_v1"), ("scale",)),
        **_cells(PADDING_STATE, ("rae",), ("verl_legacy",), ("no_token_rows",)),
        **_cells(RAE_V1, ("rae",), ("verl_v1",), ("equals_collector", "no_token_rows", "composite_linear", "state_roundtrip", "scale")),
        **_cells(STATEFUL_TERM, ("rae",), (*CORE_FORMS, "trl_outcome", "verl_legacy"), ("composite_linear",)),
        **_cells(STATEFUL_TERM, ("rae",), ("composite_term",), ("equals_collector", "scale", "state_roundtrip", "permutation")),
        **_cells(ANCHORED_TERM, ("gigpo",), (*CORE_FORMS, "trl_turn", "verl_step_bridge", "verl_v1"), ("composite_linear",)),
        **_cells(ANCHORED_TERM, ("gigpo",), ("composite_term",), ("equals_collector",)),
        **_cells(LENGTH_TERM, LENGTH_BASED, (*CORE_FORMS, "trl_outcome", "verl_legacy", "verl_v1"), ("composite_linear",)),
        **_cells(LENGTH_TERM, LENGTH_BASED, ("composite_term",), ("equals_collector",)),
    }
)
