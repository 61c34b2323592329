"""Where step-level credit goes: mean advantage and reward by turn index.

For trajectories of one or more turns, flat ``(K,)`` per-turn values with ``offsets`` ``(N + 1,)``
(trajectory ``i`` owns turns ``offsets[i]:offsets[i + 1]``, in turn order; a trajectory without turns
owns none and counts nowhere):

- ``turn/{t}/advantage_mean`` and ``turn/{t}/reward_mean`` for the first :data:`FIRST_TURNS` turn
  indices ``t`` that some trajectory reaches (the mean over the trajectories that reach turn ``t``);
- ``turn/last/advantage_mean`` and ``turn/last/reward_mean``: over every trajectory's last turn;
- ``turn/count_mean``: turns per trajectory.

The same keys in the core (``turn/{role}/...`` from the collector), verl (``rllm/turn/...`` in the v1
trainer's metrics) and TRL (``turn/...`` in its logs).
"""

from __future__ import annotations

import numpy as np

__all__ = ["FIRST_TURNS", "turn_metrics"]

FIRST_TURNS = 3


def turn_metrics(advantages: np.ndarray, rewards: np.ndarray, offsets: np.ndarray) -> dict[str, float]:
    """Per-turn means (keys above) of ``advantages`` and ``rewards`` ``(K,)``; ``{}`` when there is no turn."""
    advantages = np.asarray(advantages, dtype=np.float64)
    rewards = np.asarray(rewards, dtype=np.float64)
    offsets = np.asarray(offsets, dtype=np.int64)
    sizes = np.diff(offsets)
    if advantages.size == 0:
        return {}
    index = np.arange(advantages.size) - np.repeat(offsets[:-1], sizes)  # turn index of each turn within its trajectory
    metrics: dict[str, float] = {}
    for t in range(min(FIRST_TURNS, int(sizes.max()))):
        at = index == t
        metrics[f"turn/{t}/advantage_mean"] = float(advantages[at].mean())
        metrics[f"turn/{t}/reward_mean"] = float(rewards[at].mean())
    last = offsets[1:][sizes > 0] - 1
    metrics["turn/last/advantage_mean"] = float(advantages[last].mean())
    metrics["turn/last/reward_mean"] = float(rewards[last].mean())
    metrics["turn/count_mean"] = float(sizes[sizes > 0].mean())
    return metrics
