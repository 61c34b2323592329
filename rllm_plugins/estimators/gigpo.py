"""GiGPO, group-in-group policy optimisation (Feng et al., 2025, https://arxiv.org/abs/2505.10978), rLLM-native.

Per task group (the trajectories of one prompt), for trajectory ``i`` and its step ``t``::

    A^E_i     = (R_i - mean_g R) / (std_g R + eps)          episode level: rLLM ``grpo`` of the outcomes
    G_{i,t}   = r_{i,t} + gamma * G_{i,t+1}                 discounted step returns (G of the last step = its reward)
    A^S_{i,t} = (G_{i,t} - mean_a G) / (std_a G + eps)      over the anchor group a: the steps of the task
                                                            group (any trajectory, any t) with an equal anchor state
    A_{i,t}   = A^E_i + step_advantage_w * A^S_{i,t}

Population std (ddof=0), eps 1e-6; a task group of one trajectory uses mean 0 and std 1 (as ``grpo``);
an anchor group of one step gets ``A^S = 0``. ``norm_adv_by_std_in_grpo=False`` drops both divisions.

verl-agent's reference code (``gigpo/core_gigpo.py``) differs in three ways, each an option:
``episode_stats="step"`` takes the episode mean and std over step rows (a trajectory of ``T`` steps
counts ``T`` times; a task group with a single step row uses mean 0, std 1), ``std_ddof=1`` takes
torch's unbiased std in both levels, and its default ``mode: mean_norm`` is
``norm_adv_by_std_in_grpo=False``.

``anchor_similarity`` (None: equal states only) groups anchors the way verl-agent's
``build_step_group(enable_similarity=True, similarity_thresh)`` does: similar states (``SequenceMatcher`` ratio
at least the threshold against a cluster's first member) share an anchor group, within a task group
(:mod:`rllm_plugins.steps.similarity`). ``similarity_autojunk`` (default False: exact ratios) turns on difflib's
autojunk heuristic, as verl-agent's ``SequenceMatcher`` has it, which differs for states of 200+ elements.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..calling import describe, is_finite_real
from ..spec import AdvEstimatorSpec
from ..steps.anchors import normalize_within
from ..steps.batch import StepBatch, discounted_returns
from ..steps.forms import step_list_form_of
from ..steps.similarity import similar_anchor_ids
from .grpo import standardize_in_groups
from .step_options import check_choice, check_discount, check_std_ddof

__all__ = ["SPECS", "calculate_gigpo_advantages", "check_gigpo_options", "gigpo"]

EPISODE_STATS = ("trajectory", "step")


def check_gigpo_options(options: Mapping[str, Any]) -> None:
    """Config-time check of gigpo's options beyond their types: ranges and choices."""
    if "gamma" in options:
        check_discount("gigpo", options["gamma"])
    check_choice("gigpo", options, "episode_stats", EPISODE_STATS)
    check_std_ddof("gigpo", options)
    threshold = options.get("anchor_similarity")
    if threshold is not None and (not is_finite_real(threshold) or not 0.0 < float(threshold) <= 1.0):
        raise ValueError(
            f"estimator 'gigpo': anchor_similarity must be None (equal states only) or a number in (0, 1] "
            f"(verl-agent's similarity_thresh, 0.95 in its examples), got {describe(threshold)}"
        )
    weight = options.get("step_advantage_w", 1.0)
    if not is_finite_real(weight):
        raise ValueError(f"estimator 'gigpo': step_advantage_w must be a finite number, got {describe(weight)}")


def gigpo(
    batch: StepBatch,
    /,
    *,
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
    gamma: float = 1.0,
    step_advantage_w: float = 1.0,
    episode_stats: str = "trajectory",
    std_ddof: int = 0,
    anchor_similarity: float | None = None,
    similarity_autojunk: bool = False,
    **_: Any,
) -> np.ndarray:
    """GiGPO: episode-level GRPO of the outcome plus step_advantage_w times the anchor-group-relative discounted return."""
    options = {"gamma": gamma, "episode_stats": episode_stats, "std_ddof": std_ddof, "step_advantage_w": step_advantage_w}
    check_gigpo_options({**options, "anchor_similarity": anchor_similarity})
    if batch.anchors is None:
        raise ValueError("estimator 'gigpo' needs an anchor state for every step (StepBatch.anchors)")
    anchors = batch.anchors
    if anchor_similarity is not None:
        if batch.anchor_states is None:
            raise ValueError("estimator 'gigpo': anchor_similarity compares anchor states, but this StepBatch carries only their ids (anchor_states=None)")
        anchors = similar_anchor_ids(batch.anchors, batch.anchor_states, batch.step_group, float(anchor_similarity), batch.place, similarity_autojunk)
    batch.warn_if_steps_carry_nothing("gigpo")
    norm = dict(norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, epsilon=epsilon, ddof=std_ddof)
    if episode_stats == "trajectory":
        episode = batch.steps.expand(standardize_in_groups(batch.outcomes, batch.traj_offsets, **norm))
    else:  # one entry per step row (verl-agent's compute_mean_std_cross_steps)
        episode = standardize_in_groups(batch.steps.expand(batch.outcomes), batch.group_step_offsets, **norm)
    returns = discounted_returns(batch.step_rewards, batch.step_offsets, gamma)
    step = normalize_within(returns, anchors, **norm)
    step *= step_advantage_w
    step += episode
    return step


calculate_gigpo_advantages = step_list_form_of(gigpo, "calculate_gigpo_advantages")

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (
    AdvEstimatorSpec(
        "gigpo",
        calculate_gigpo_advantages,
        gigpo,
        options=(),
        level="step",
        needs_anchors=True,
        check_options=check_gigpo_options,
        breaks={
            "option_sensitivity:similarity_autojunk": "difflib's autojunk changes a ratio only for states of 200+ elements, and only with "
            "anchor_similarity set; the samples' states are short (tests/steps/test_anchor_similarity.py checks it on long ones)"
        },
    ),
)
