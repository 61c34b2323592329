"""The built-in reward shapers, registered as the first plugin (hook ``rllm_reward_shapers``)."""

from __future__ import annotations

from collections.abc import Iterable

from ..discovery.hookspecs import hookimpl
from ..shaper_spec import ShaperSpec
from .dapo_overlong import dapo_overlong
from .efficiency import efficiency_bonus
from .group_length import group_length_penalty
from .length_penalty import length_penalty, linear_length_penalty
from .turn_count import turn_penalty

BUILTIN_SHAPERS = (
    ShaperSpec(
        "dapo_overlong", dapo_overlong, "0 up to max_length - buffer tokens, then down linearly to -factor at max_length (DAPO; verl's DAPO reward manager)",
        requires=("lengths",),
    ),
    ShaperSpec(
        "length_penalty", length_penalty,
        "-(group pass rate) x weighted fractions of the group's most output tokens, input tokens and turns (prime-rl's GRPO and turn_credit)",
        requires=("offsets", "lengths"),
    ),
    ShaperSpec(
        "linear_length_penalty", linear_length_penalty,
        "-coef x (group pass rate) x tokens / max_length, optionally times the unit's reward (prime-rl #2702)", requires=("offsets", "lengths"),
    ),
    ShaperSpec(
        "efficiency_bonus", efficiency_bonus,
        "the group's best answers earn reward x (1 - cost / their mean cost), clipped to [0, 1] (prime-rl #2265, #2377)", requires=("offsets", "lengths"),
    ),
    ShaperSpec(
        "group_length_penalty", group_length_penalty,
        "successes longer than a slack over the group's short successes pay up to cap, down to a floor (miles #1573)", requires=("offsets", "lengths"),
    ),
    ShaperSpec("turn_penalty", turn_penalty, "-coef per model turn beyond free_turns, optionally only for successes", requires=("turns",)),
)  # fmt: skip


@hookimpl
def rllm_reward_shapers() -> Iterable[ShaperSpec]:
    return BUILTIN_SHAPERS
