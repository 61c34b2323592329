"""A stateful ``rllm_*`` estimator's call in verl: the rows with model tokens only, the state of this process, a commit to run last.

verl pads its batches with rows whose ``response_mask`` is all 0 (v1's ``_balance_batch``, uid
``pad…``); a running baseline must never see them. :func:`stateful_advantages` runs the estimator
on the live rows (those with at least one model token; a group of none is dropped), in the order
given, from :func:`~.estimator_state.verl_estimator_state` under the role ``"all_groups"`` (verl's
registry path has no roles), after checking the options match those the state was made with. It
returns the advantages (0 on the other rows) and a ``commit`` to call once every later check passed,
so that a call that raises leaves the state as it was. The row path (:mod:`.bridge`) and the session
path (:mod:`.multi_trajectories`) share it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rllm_plugins.options import state_options
from rllm_plugins.outputs import as_advantages
from rllm_plugins.segments import offsets_from_sizes
from rllm_plugins.state.store import call_stateful
from rllm_verl.compute.state import VERL_ROLE, verl_estimator_state

__all__ = ["stateful_advantages"]


def stateful_advantages(
    estimator: Any, values: np.ndarray, offsets: np.ndarray, live: np.ndarray, options: dict[str, Any], who: str
) -> tuple[np.ndarray, Callable[[], None]]:
    """Advantages (N,) float64 of a stateful ``estimator`` over ``values`` (N,) in groups ``offsets`` (G + 1,), 0 where ``live`` (N,) bool is False.

    Returns ``(advantages, commit)``; ``ValueError`` naming ``who`` when the estimator's output does not fit.
    """
    name = estimator.spec.name
    owner = verl_estimator_state()
    recorded = state_options(estimator.spec, options)
    owner.check_options(name, recorded)
    group_of_row = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
    sizes = np.bincount(group_of_row[live], minlength=offsets.size - 1)
    kept = dict(options)
    if "lengths" in kept:
        kept["lengths"] = kept["lengths"][live]
    schema = estimator.spec.state_schema
    current = owner.get(name, VERL_ROLE, schema)
    result, new_state = call_stateful(estimator.batched_form, current, who, values[live], offsets_from_sizes(sizes[sizes > 0]), schema=schema, **kept)
    advantages = as_advantages(result, who)
    if advantages.size != int(live.sum()):
        raise ValueError(f"{who} returned {advantages.size} advantages for {int(live.sum())} rows with model tokens")
    out = np.zeros(values.shape[0], dtype=np.float64)
    out[live] = advantages
    return out, lambda: owner.commit({(name, VERL_ROLE): new_state}, {name: recorded})
