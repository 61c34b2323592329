"""Per-role batch diagnostics ``batch/{role}/...``: how many groups carry a learning signal.

A group with zero reward spread gets zero advantage from every centring estimator. Over the
groups of a role with at least two trajectories (a group of one has no spread to speak of):

- ``total``: those groups; ``informative``: those whose population std is >= 1e-8;
- ``fractions/effective`` = informative / total; ``fractions/too_easy`` and ``fractions/too_hard``:
  zero-spread groups whose mean reward is >= 1.0, resp. <= 0.0 (all solved / all failed);
- ``group_reward_mean/p{10,50,90}`` and ``group_reward_std/p{10,50,90}``: percentiles (numpy's
  linear interpolation) of the per-group mean and population std.

Roles without such a group get no keys. These are the keys and definitions of rLLM's collector.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .segments import GroupLayout

__all__ = ["INFORMATIVE_STD", "batch_diagnostics", "role_batch_diagnostics"]

INFORMATIVE_STD = 1e-8  # a group whose reward std is below this has no learning signal
_PERCENTILES = (10, 50, 90)


def role_batch_diagnostics(values: np.ndarray, offsets: np.ndarray) -> dict[str, float]:
    """Diagnostics of one role's groups, keys without the ``batch/{role}/`` prefix (empty: no group of >= 2).

    ``values`` float ``(N,)`` trajectory rewards, ``offsets`` int ``(G + 1,)`` group boundaries.
    """
    values = np.asarray(values, dtype=np.float64)
    layout = GroupLayout.from_offsets(offsets, values.size)
    keep = layout.sizes >= 2
    if not keep.any():
        return {}
    mean_all = layout.mean(values)
    mean, std = mean_all[keep], layout.std(values, mean_all)[keep]
    total = int(keep.sum())
    informative = std >= INFORMATIVE_STD
    flat = ~informative
    too_easy = int(np.count_nonzero(flat & (mean >= 1.0)))
    too_hard = int(np.count_nonzero(flat & (mean <= 0.0)))
    n_informative = int(np.count_nonzero(informative))
    out = {
        "total": float(total),
        "informative": float(n_informative),
        "fractions/effective": n_informative / total,
        "fractions/too_easy": too_easy / total,
        "fractions/too_hard": too_hard / total,
    }
    mean_p, std_p = np.percentile(mean, _PERCENTILES), np.percentile(std, _PERCENTILES)
    for p, m, s in zip(_PERCENTILES, mean_p.tolist(), std_p.tolist(), strict=True):
        out[f"group_reward_mean/p{p}"] = m
        out[f"group_reward_std/p{p}"] = s
    return out


def batch_diagnostics(groups_by_role: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, float]:
    """``batch/{role}/...`` for every role: ``{role: (values (N,), offsets (G + 1,))}`` -> metrics."""
    metrics: dict[str, float] = {}
    for role, (values, offsets) in groups_by_role.items():
        for key, value in role_batch_diagnostics(values, offsets).items():
            metrics[f"batch/{role}/{key}"] = value
    return metrics
