"""``minus_length_weighted_mean`` (rLLM PR #757), its outcome mode: one length-weighted baseline for the whole role.

``b = sum_i l_i r_i / sum_i l_i`` over every trajectory of the role (all its groups: the "generation
pool"), ``l_i`` the trajectory's response tokens; ``A_i = r_i - b``. It is the mean reward per response
token, so a long answer weighs more in the baseline (unlike ``opo``, whose baseline is per group). A
role without any response token has baseline 0. No std: ``norm_adv_by_std_in_grpo`` does not apply.

The PR's token mode (a step carrying ``metadata["per_token_rewards"]``: one advantage per token,
``reward_t - b``) is refused: it would be a third level beside outcome and step, which neither
adapter can feed (verl's bridge and TRL hand the estimator one reward per row). Per-token advantages
computed in the workflow go through ``use_precomputed_advantage=True`` instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..spec import AdvEstimatorSpec, list_form_of

__all__ = ["SPECS", "calculate_minus_length_weighted_mean_advantages", "minus_length_weighted_mean"]

TOKEN_REWARDS_KEY = "per_token_rewards"


def minus_length_weighted_mean(values: np.ndarray, offsets: np.ndarray, /, *, lengths: np.ndarray | None = None, **_: Any) -> np.ndarray:
    """r - the role's length-weighted mean reward (0 without response tokens); needs response `lengths` (N,)."""
    if lengths is None:
        raise ValueError(
            "estimator 'minus_length_weighted_mean' needs the response length of every trajectory: pass lengths=(N,) or traj_groups with response_ids"
        )
    lengths = np.asarray(lengths, dtype=np.float64)
    if lengths.shape != values.shape:
        raise ValueError(f"estimator 'minus_length_weighted_mean': lengths has shape {lengths.shape}, rewards have {values.shape}")
    total = float(lengths.sum())
    baseline = float(np.einsum("i,i->", lengths, values)) / total if total > 0 else 0.0  # einsum: no BLAS threads
    return values - baseline


_list_form = list_form_of(minus_length_weighted_mean, "calculate_minus_length_weighted_mean_advantages")


def _refuse_token_mode(traj_groups: Sequence[Any] | None) -> None:
    for g, group in enumerate(traj_groups or ()):
        for t, trajectory in enumerate(group.trajectories):
            for s, step in enumerate(trajectory.steps):
                if isinstance(step.metadata, dict) and TOKEN_REWARDS_KEY in step.metadata:
                    raise ValueError(
                        f"estimator 'minus_length_weighted_mean': group {g} ({group.group_id!r}), trajectory {t}, step {s} carries "
                        f"metadata[{TOKEN_REWARDS_KEY!r}]: the token mode of rLLM PR #757 is not supported (one advantage per token is "
                        "neither the outcome nor the step level). Compute the per-token advantages in the workflow and set "
                        "use_precomputed_advantage=True, or drop the per-token rewards for the outcome mode"
                    )


def calculate_minus_length_weighted_mean_advantages(rewards: Sequence[Any], *args: Any, **kwargs: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """List form; refuses per-token rewards (the PR's token mode)."""
    _refuse_token_mode(kwargs.get("traj_groups"))
    return _list_form(rewards, *args, **kwargs)


# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (
    AdvEstimatorSpec("minus_length_weighted_mean", calculate_minus_length_weighted_mean_advantages, minus_length_weighted_mean, options=()),
)
