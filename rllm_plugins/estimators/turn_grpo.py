"""Turn GRPO: episode-level GRPO plus a per-turn baseline by turn index (MT-GRPO, arXiv 2505.11821), rLLM-native.

Per task group (the trajectories of one prompt), trajectory ``i`` of ``T_i`` steps, step ``t``::

    A^E_i     = (R_i - mean_g R) / (std_g R + eps)               episode level: rLLM ``grpo`` of the outcomes
    v_{i,t}   = G_{i,t} (value="return") or r_{i,t} (value="reward" and "reward_to_go")
    z_{i,t}   = (v_{i,t} - mean_t v) / (std_t v + eps)            over the population of turn t
    A^T_{i,t} = z_{i,t}, or with value="reward_to_go" sum_{s >= t} gamma^(s-t) z_{i,s} over every turn index s of
                the task group, z_{i,s} of a turn after the trajectory's end being its value 0's (the number of
                terms never depends on where the trajectory itself stopped)
    A_{i,t}   = A^E_i + lam * A^T_{i,t}

The population of turn ``t`` is, with ``ended="absorbing"`` (default), every trajectory of the task group, one that
ended before ``t`` counting with value 0 (so the baseline of turn ``t`` does not depend on which trajectories the
policy let reach it); with ``ended="present"``, the trajectories that reached turn ``t`` (``gigpo`` with every
step's anchor its turn index); ``value="reward_to_go"`` takes ``"absorbing"`` only. ``baseline="leave_one_out"``
centres every population (the episode level's and each turn's) on the mean of its *other* members, RLOO's baseline:
``n / (n - 1)`` times the centred value, ``n`` the population's size (a task group of one keeps its episode value).
Without the std division, ``value="reward_to_go"`` with it is verl RFC #7244's criterion met exactly: the baseline
of a decision depends neither on the trajectory's own later stopping nor on its own rewards, so the policy gradient
is unbiased when the policy decides when to stop (``benchmarks/turn_baseline_bias.py``). Population std (ddof 0;
``std_ddof=1``: the unbiased std in both levels), eps 1e-6; a population of one gives ``A^T = 0``;
``norm_adv_by_std_in_grpo=False`` drops both divisions. MT-GRPO (two turns, a tool call then the answer) is
``value="reward", ended="present", lam=coef, std_ddof=1, epsilon=1e-4`` with step rewards ``[R_turn, 0]`` and the
outcome reward as the trajectory's: the outcome part on every turn, the turn part on the first. Its completions
without a tool result (one turn, step rewards ``[R_turn]``) get the *combined* reward standardised over the task
group: ``single_turn="combined"`` gives a trajectory of one step ``(c_i - mean_g c) / (std_g c + eps)`` with
``c = R + sum_t r_t`` (every trajectory of the group in the population; the same std and eps; a task group of one trajectory
takes mean 0 and std 1, as ``grpo``), instead of the formula above.
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
from .grpo import spread_divisor, standardize_in_groups
from .step_options import check_choice, check_discount, check_std_ddof

__all__ = ["SPECS", "calculate_turn_grpo_advantages", "check_turn_grpo_options", "turn_grpo", "turn_index"]

VALUES = ("return", "reward", "reward_to_go")
BASELINES = ("mean", "leave_one_out")
ENDED = ("absorbing", "present")
SINGLE_TURN = ("turns", "combined")


def check_turn_grpo_options(options: Mapping[str, Any]) -> None:
    """Config-time check of turn_grpo's options beyond their types: ranges and choices."""
    if "gamma" in options:
        check_discount("turn_grpo", options["gamma"])
    check_choice("turn_grpo", options, "value", VALUES)
    check_choice("turn_grpo", options, "ended", ENDED)
    check_choice("turn_grpo", options, "single_turn", SINGLE_TURN)
    check_choice("turn_grpo", options, "baseline", BASELINES)
    if options.get("value") == "reward_to_go" and options.get("ended", "absorbing") != "absorbing":
        raise ValueError(
            "estimator 'turn_grpo': value='reward_to_go' sums a turn's term over every later turn index of the task group, "
            "an ended trajectory's counting as its value 0, so it needs ended='absorbing' (with 'present' the number of "
            f"terms would again depend on where the trajectory stopped), got ended={options.get('ended')!r}"
        )
    check_std_ddof("turn_grpo", options)
    lam = options.get("lam", 1.0)
    if not is_finite_real(lam):
        raise ValueError(f"estimator 'turn_grpo': lam (the weight of the per-turn part) must be a finite number, got {describe(lam)}")


def turn_index(batch: StepBatch) -> np.ndarray:
    """``(S,)`` int64: each step's position in its trajectory (0 for the first turn)."""
    return np.arange(batch.num_steps, dtype=np.int64) - batch.steps.expand(batch.step_offsets[:-1])


def _turn_ids(batch: StepBatch, turns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ids of the ``(task group, turn)`` pairs ``(S,)`` (``group * longest + turn``, compacted when sparse), and the task group of each id."""
    longest = int(turns.max()) + 1
    keys = batch.step_group * longest + turns
    span = batch.num_groups * longest
    if span <= 4 * keys.size:  # typical: every id a slot of one table, no sort
        return keys, np.repeat(np.arange(batch.num_groups, dtype=np.int64), longest)
    unique, ids = np.unique(keys, return_inverse=True)  # one very long trajectory: compact the ids
    return ids.reshape(-1).astype(np.int64, copy=False), unique // longest


def _normalize_absorbing(
    values: np.ndarray, ids: np.ndarray, size: np.ndarray, *, norm_adv_by_std_in_grpo: bool, epsilon: float, ddof: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``(v - mean) / (std + eps)`` within each id whose population has ``size[id]`` members, the absent ones valued 0.

    ``values`` ``(S,)``, ``ids`` ``(S,)`` dense, ``size`` ``(K,)`` >= the present count. The std has ``ddof``;
    a population of one gives 0; the mean takes one correction pass (equal values give exactly 0).
    Returns the steps' ``(S,)`` and, ``(K,)``, what an absent member's 0 becomes in each id (0 where none is absent).
    Magnitudes whose mean or variance overflow take :func:`normalize_within` with the absent zeros written out.
    """
    present = np.bincount(ids, minlength=size.size)
    absent = size - present  # ids without a step (a turn no trajectory of the group reached) have size - 0 absent, never read
    with np.errstate(over="ignore", invalid="ignore"):
        mean = np.bincount(ids, values, minlength=size.size) / size
        mean += (np.bincount(ids, values - mean[ids], minlength=size.size) - absent * mean) / size
        centred = values - mean[ids]
        var = (np.bincount(ids, centred * centred, minlength=size.size) + absent * mean * mean) / np.maximum(size - ddof, 1)
    if not (np.isfinite(mean).all() and np.isfinite(var).all()):
        return _normalize_written_out(values, ids, absent * (present > 0), norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, epsilon=epsilon, ddof=ddof)
    single = size <= 1
    centred[single[ids]] = 0.0
    zeros = np.where(single | (absent <= 0) | (present <= 0), 0.0, -mean)
    if norm_adv_by_std_in_grpo:
        divisor = spread_divisor(np.sqrt(var), epsilon)
        centred /= divisor[ids]
        zeros /= divisor
    return centred, zeros


def _normalize_written_out(
    values: np.ndarray, ids: np.ndarray, absent: np.ndarray, *, norm_adv_by_std_in_grpo: bool, epsilon: float, ddof: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_normalize_absorbing` with ``absent[id]`` zeros appended to each id's population (overflow-safe, slower)."""
    zeros = np.repeat(np.arange(absent.size, dtype=np.int64), absent.astype(np.int64))
    population, population_ids = np.concatenate((values, np.zeros(zeros.size))), np.concatenate((ids, zeros))
    every = normalize_within(population, population_ids, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, epsilon=epsilon, ddof=ddof)
    zero_terms = np.zeros(absent.size)
    zero_terms[zeros] = every[values.size :]
    return every[: values.size], zero_terms


def _leave_one_out_scale(sizes: np.ndarray) -> np.ndarray:
    """``n / (n - 1)`` per population of ``n`` members (1 for a population of one): centring on the others' mean."""
    n = sizes.astype(np.float64)
    return np.where(n > 1, n / np.maximum(n - 1.0, 1.0), 1.0)


def _sum_to_go(batch: StepBatch, terms: np.ndarray, ids: np.ndarray, id_group: np.ndarray, zeros: np.ndarray, gamma: float) -> np.ndarray:
    """``(S,)``: each step's ``sum_{s >= t} gamma^(s-t) z_s`` over every turn index of its task group.

    ``terms`` ``(S,)`` the steps' own ``z``; ``zeros`` ``(K,)`` the ``z`` of a 0 in each turn's population, what a
    turn after the trajectory's end adds. A task group's ids are contiguous and in turn order (``id_group``
    ``(K,)`` nondecreasing), so the turns after a trajectory's end start at the id after its last step's.
    A sum beyond the float64 range is a ``ValueError`` naming the task group or the step.
    """
    id_offsets = np.searchsorted(id_group, np.arange(batch.num_groups + 1))
    tails = _tails(zeros, id_offsets, gamma)  # per id: the discounted sum of the zeros' terms from that turn on
    own = discounted_returns(terms, batch.step_offsets, gamma)  # the trajectory's own turns
    sizes = batch.steps.sizes
    after = ids[np.maximum(batch.step_offsets[1:] - 1, 0)] + 1  # (N,) the id after each trajectory's last step's (read where it has steps)
    inside = (sizes > 0) & (after < id_offsets[batch.trajectories.group_index + 1])  # a turn of the task group follows its last
    tail = np.where(inside, tails[np.where(inside, after, 0)], 0.0)  # (N,)
    from_end = batch.steps.expand(sizes) - (np.arange(batch.num_steps) - batch.steps.expand(batch.step_offsets[:-1]))  # K_i - t
    with np.errstate(over="ignore", invalid="ignore"):
        out = own + np.power(gamma, from_end) * batch.steps.expand(tail)
    if not np.isfinite(out).all():
        s = int(np.flatnonzero(~np.isfinite(out))[0])
        i = int(np.searchsorted(batch.step_offsets, s, side="right") - 1)
        raise ValueError(
            f"estimator 'turn_grpo' (value='reward_to_go'): trajectory {i} (in batch order), step {s - int(batch.step_offsets[i])}: "
            "the sum of its turns' terms is beyond the float64 range; scale the step rewards down"
        )
    return out


def _tails(zeros: np.ndarray, id_offsets: np.ndarray, gamma: float) -> np.ndarray:
    """:func:`discounted_returns` of the zeros' terms within each task group's ids; beyond the float64 range, a ``ValueError`` naming the group."""
    try:
        return discounted_returns(zeros, id_offsets, gamma)
    except ValueError:
        for g in range(id_offsets.size - 1):
            part = zeros[id_offsets[g] : id_offsets[g + 1]]
            try:
                discounted_returns(part, np.array([0, part.size]), gamma)
            except ValueError:
                raise ValueError(
                    f"estimator 'turn_grpo' (value='reward_to_go'): task group {g}: the sum of its turns' terms after a trajectory's end "
                    "is beyond the float64 range; scale the step rewards down"
                ) from None
        raise


def turn_grpo(
    batch: StepBatch,
    /,
    *,
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
    lam: float = 1.0,
    gamma: float = 1.0,
    value: str = "return",
    ended: str = "absorbing",
    std_ddof: int = 0,
    single_turn: str = "turns",
    baseline: str = "mean",
    **_: Any,
) -> np.ndarray:
    """Turn GRPO: episode-level GRPO of the outcome plus lam times the step's value against its turn's population."""
    options = {"gamma": gamma, "value": value, "ended": ended, "lam": lam, "std_ddof": std_ddof, "single_turn": single_turn, "baseline": baseline}
    check_turn_grpo_options(options)
    if batch.num_steps == 0:
        return np.zeros(0)
    batch.warn_if_steps_carry_nothing("turn_grpo")
    norm = dict(norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, epsilon=epsilon)
    trajectory_level = standardize_in_groups(batch.outcomes, batch.traj_offsets, **norm, ddof=std_ddof)
    if baseline == "leave_one_out":
        with np.errstate(over="ignore"):
            trajectory_level *= batch.trajectories.expand(_leave_one_out_scale(batch.trajectories.sizes))
    episode = batch.steps.expand(trajectory_level)
    values = discounted_returns(batch.step_rewards, batch.step_offsets, gamma) if value == "return" else batch.step_rewards.copy()
    ids, id_group = _turn_ids(batch, turn_index(batch))
    if ended == "present":
        per_turn = normalize_within(values, ids, **norm, ddof=std_ddof)
        sizes = np.bincount(ids, minlength=id_group.size)
    else:
        sizes = np.maximum(batch.trajectories.sizes[id_group], 1).astype(np.float64)  # (an empty task group owns no step)
        per_turn, zeros = _normalize_absorbing(values, ids, sizes, **norm, ddof=std_ddof)
    if baseline == "leave_one_out":
        scale = _leave_one_out_scale(sizes)
        with np.errstate(over="ignore"):  # beyond the float64 range stays inf, refused where the advantages are checked
            per_turn *= scale[ids]
            if value == "reward_to_go":
                zeros *= scale
    if value == "reward_to_go":
        per_turn = _sum_to_go(batch, per_turn, ids, id_group, zeros, gamma)
    per_turn *= lam
    per_turn += episode
    if single_turn == "combined":
        _combined_on_single_turns(batch, per_turn, norm, std_ddof, baseline)
    return per_turn


def _combined_on_single_turns(batch: StepBatch, advantages: np.ndarray, norm: Mapping[str, Any], ddof: int, baseline: str) -> None:
    """Write, in place, on each one-step trajectory's step its combined reward ``R + sum_t r_t`` standardised in its task group
    (a task group of one trajectory: mean 0, std 1, as ``grpo``; ``baseline="leave_one_out"``: centred on the others' mean)."""
    single = batch.steps.sizes == 1
    if not single.any():
        return
    with np.errstate(over="ignore", invalid="ignore"):
        combined = batch.outcomes + batch.steps.sum(batch.step_rewards)
    read = batch.trajectories.expand(batch.trajectories.sum(single.astype(np.float64)) > 0)  # the task groups with a one-step trajectory
    unreadable = ~np.isfinite(combined)
    combined[unreadable & ~read] = 0.0  # a task group without one is never read
    if (unreadable & read).any():
        i = int(np.flatnonzero(unreadable & read)[0])
        g = int(np.searchsorted(batch.traj_offsets, i, side="right") - 1)
        raise ValueError(
            f"estimator 'turn_grpo' (single_turn='combined'): task group {g}, trajectory {i - int(batch.traj_offsets[g])}: its reward plus "
            "its step rewards overflows float64; scale the rewards down"
        )
    standardized = standardize_in_groups(combined, batch.traj_offsets, **norm, ddof=ddof)
    if baseline == "leave_one_out":
        standardized *= batch.trajectories.expand(_leave_one_out_scale(batch.trajectories.sizes))
    advantages[batch.step_offsets[:-1][single]] = standardized[single]


calculate_turn_grpo_advantages = step_list_form_of(turn_grpo, "calculate_turn_grpo_advantages")

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (
    AdvEstimatorSpec("turn_grpo", calculate_turn_grpo_advantages, turn_grpo, options=(), level="step", check_options=check_turn_grpo_options),
)
