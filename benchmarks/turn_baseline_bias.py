"""Bias of per-turn baselines when the policy decides when to stop (verl RFC #7244), measured.

The environment: up to ``H`` turns; at each turn before the last the policy continues with probability
``p = sigmoid(theta)`` or stops. A turn after which it continues earns the intermediate reward ``c``; the last
turn's reward pays every one back and adds noise independent of the actions, ``-c (K - 1) + eps``
(``K`` turns taken, ``eps ~ N(0, 1)``). So every trajectory's return is ``eps``: the expected return does not
depend on ``theta``, the true policy gradient is exactly 0, and the mean of an estimator's gradient estimate is its
bias. An estimate per task group of ``n`` trajectories is ``mean_i sum_t d log pi(a_t)/d theta * A_{i,t}`` over the
turns with a decision (``1 - p`` for continue, ``-p`` for stop), ``A`` the estimator's per-step advantages (without
std normalisation, which only rescales).

The estimators: ``rloo`` of the return (broadcast, the unbiased reference); ``per_turn_index_sum`` (the RFC's
construction, MT-GRPO-style: each turn's reward minus its mean over the group's trajectories that reached that
turn index, summed over the trajectory's turns, broadcast); ``turn_grpo`` with ``value="reward", ended="present"``
(our MT-GRPO setting); ``turn_grpo`` with returns (the default: ``value="return", ended="absorbing"``); ``gigpo``
with the turn index as anchor; ``turn_credit`` with the return as the outcome and each turn's score the intermediate
reward earned so far.

Run: ``python -m benchmarks.turn_baseline_bias [--quick]``; writes ``docs/turn_baseline_bias.png``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rllm_plugins.estimators.gigpo import gigpo
from rllm_plugins.estimators.turn_credit import turn_credit
from rllm_plugins.estimators.turn_grpo import turn_grpo
from rllm_plugins.steps.batch import StepBatch

__all__ = ["ESTIMATORS", "Episodes", "bias", "sample", "table"]

HORIZON = 4
GROUP = 8
PLOT = Path(__file__).resolve().parents[1] / "docs" / "turn_baseline_bias.png"


@dataclass(frozen=True)
class Episodes:
    """``groups`` task groups of ``GROUP`` trajectories: the step batch and each step's score ``d log pi(a_t)/d theta``."""

    batch: StepBatch
    score: np.ndarray
    turn: np.ndarray  # (S,) 0-based turn index
    turns: np.ndarray  # (N,) turns taken
    c: float
    groups: int


def sample(c: float, groups: int, seed: int = 0, theta: float = 0.0) -> Episodes:
    """Draw the episodes of the environment above (intermediate reward ``c``)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / (1.0 + np.exp(-theta))
    n = groups * GROUP
    cont = rng.random((n, HORIZON - 1)) < p
    turns = np.where(cont.all(axis=1), HORIZON, cont.argmin(axis=1) + 1)
    noise = rng.normal(size=n)
    step_offsets = np.concatenate([[0], np.cumsum(turns)])
    turn = np.arange(int(step_offsets[-1])) - np.repeat(step_offsets[:-1], turns)
    last = np.repeat(turns, turns) - 1
    rewards = np.where(turn < last, c, -c * last + np.repeat(noise, turns))
    decided = turn <= HORIZON - 2  # the last possible turn has no decision
    score = np.where(turn < last, 1.0 - p, -p) * decided
    group_of_step = np.repeat(np.arange(n) // GROUP, turns)
    anchors = (group_of_step * HORIZON + turn).astype(np.int64)  # the turn index within the task group
    outcomes = np.add.reduceat(rewards, step_offsets[:-1])
    batch = StepBatch(outcomes, np.arange(0, n + 1, GROUP), rewards, step_offsets, anchors=anchors)
    return Episodes(batch, score, turn, turns, c, groups)


def _broadcast(per_trajectory: np.ndarray, e: Episodes) -> np.ndarray:
    return np.repeat(per_trajectory, e.turns)


def rloo(e: Episodes) -> np.ndarray:
    returns = e.batch.outcomes.reshape(e.groups, GROUP)
    return _broadcast((GROUP / (GROUP - 1) * (returns - returns.mean(axis=1, keepdims=True))).ravel(), e)


def per_turn_index_sum(e: Episodes) -> np.ndarray:
    """The RFC's construction: sum over the trajectory's turns of (reward - its turn index's mean over the trajectories that reached it)."""
    key = e.batch.anchors
    count = np.bincount(key, minlength=e.groups * HORIZON)
    mean = (np.bincount(key, e.batch.step_rewards, minlength=e.groups * HORIZON) / np.maximum(count, 1))[key]
    return _broadcast(np.add.reduceat(e.batch.step_rewards - mean, e.batch.step_offsets[:-1]), e)


def credit(e: Episodes) -> np.ndarray:
    """``turn_credit``: the outcome is the return; the score after each turn is the intermediate reward earned so far (``c`` per
    turn after which the policy continued; the final payback is part of the return, not of the state's score)."""
    earned = np.where(e.turn < np.repeat(e.turns, e.turns) - 1, e.c * (e.turn + 1), e.c * (np.repeat(e.turns, e.turns) - 1))
    scored = StepBatch(e.batch.outcomes, e.batch.traj_offsets, earned.astype(np.float64), e.batch.step_offsets)
    return turn_credit(scored, gamma=1.0, beta=1.0)


ESTIMATORS: dict[str, Callable[[Episodes], np.ndarray]] = {
    "rloo (return)": rloo,
    "per-turn-index sum (RFC's construction)": per_turn_index_sum,
    "turn_grpo value=reward ended=present": lambda e: turn_grpo(e.batch, norm_adv_by_std_in_grpo=False, value="reward", ended="present"),
    "turn_grpo value=return (default)": lambda e: turn_grpo(e.batch, norm_adv_by_std_in_grpo=False),
    "gigpo, turn index as anchor": lambda e: gigpo(e.batch, norm_adv_by_std_in_grpo=False),
    "turn_credit (score: intermediate reward so far)": credit,
}


def bias(e: Episodes, advantages: np.ndarray) -> tuple[float, float]:
    """Mean gradient estimate per task group (the bias: the true gradient is 0) and its standard error."""
    per_trajectory = np.add.reduceat(e.score * advantages, e.batch.step_offsets[:-1])
    per_group = per_trajectory.reshape(e.groups, GROUP).mean(axis=1)
    return float(per_group.mean()), float(per_group.std(ddof=1) / np.sqrt(e.groups))


def table(cs: tuple[float, ...] = (0.0, 0.5, 1.0, 2.0), groups: int = 20000, seed: int = 0) -> dict[str, list[tuple[float, float]]]:
    """``{estimator: [(bias, standard error) per c]}``."""
    out: dict[str, list[tuple[float, float]]] = {name: [] for name in ESTIMATORS}
    for c in cs:
        e = sample(c, groups, seed)
        for name, fn in ESTIMATORS.items():
            out[name].append(bias(e, fn(e)))
    return out


def save_plot(cs: tuple[float, ...], results: dict[str, list[tuple[float, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, points in results.items():
        ax.errorbar(cs, [b for b, _ in points], yerr=[2 * s for _, s in points], marker="o", capsize=3, label=name)
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xlabel("intermediate reward c per extra turn")
    ax.set_ylabel("bias of the policy gradient (true gradient 0)")
    ax.set_title(f"Learned stopping: {HORIZON} turns at most, groups of {GROUP}, p(continue)=0.5")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 task groups per point instead of 20,000")
    args = parser.parse_args(argv)
    cs = (0.0, 0.5, 1.0, 2.0)
    results = table(cs, groups=2000 if args.quick else 20000)
    for name, points in results.items():
        print(f"{name:45s}" + "".join(f"  {b:+.4f} ± {s:.4f}" for b, s in points))
    save_plot(cs, results, PLOT)
    print(f"plot: {PLOT}")


if __name__ == "__main__":
    main()
