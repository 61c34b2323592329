"""What the demo shows: the per-estimator training table, the verl side-by-side table, the reward-curve plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from training import RunResult
from verl_comparison import Comparison

__all__ = ["comparison_table", "plot_reward_curves", "training_table"]

WINDOW = 5  # steps averaged at each end of a run, and for the smoothed curve


def _row(cells: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(cell.rjust(width) if i else cell.ljust(width) for i, (cell, width) in enumerate(zip(cells, widths, strict=True)))


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=True)]
    lines = [_row(header, widths), _row(["-" * w for w in widths], widths)]
    lines += [_row(row, widths) for row in rows]
    return "\n".join(lines)


def training_table(results: Sequence[RunResult], unit: str = "completions") -> str:
    """One row per estimator: mean reward over the first and last steps, advantage statistics, share of zero advantages (of ``unit``)."""
    window = max(1, min([WINDOW, *(len(r.steps) for r in results)]))
    header = [
        "estimator",
        f"reward first {window}",
        f"reward last {window}",
        "adv mean",
        "adv std",
        "adv min",
        "adv max",
        "zero adv",
        "seconds",
    ]
    rows = []
    for result in results:
        steps = result.steps
        rows.append(
            [
                result.estimator,
                f"{np.mean([s.reward for s in steps[:window]]):.3f}",
                f"{np.mean([s.reward for s in steps[-window:]]):.3f}",
                f"{np.mean([s.advantage_mean for s in steps]):+.3f}",
                f"{np.mean([s.advantage_std for s in steps]):.3f}",
                f"{min(s.advantage_min for s in steps):+.3f}",
                f"{max(s.advantage_max for s in steps):+.3f}",
                f"{np.mean([s.fraction_zero for s in steps]):.0%}",
                f"{result.seconds:.0f}",
            ]
        )
    notes = (
        f"{len(results[0].steps) if results else 0} steps each; adv mean/std/zero adv: mean over steps of each step's value; "
        f"adv min/max: over all steps; zero adv: share of {unit} with advantage 0 (|a| < 1e-8)."
    )
    return _table(header, rows) + "\n" + notes


def comparison_table(comparison: Comparison) -> str:
    """One row per response: its prompt, response, token length and reward, then each estimator's advantage."""
    names = list(comparison.advantages)
    header = ["prompt", "response", "tokens", "reward", *names]
    rows = [
        [
            comparison.prompts[i],
            repr(comparison.responses[i]),
            str(comparison.lengths[i]),
            f"{comparison.rewards[i]:.0f}",
            *(f"{comparison.advantages[n][i]:+.4f}" for n in names),
        ]
        for i in range(len(comparison.prompts))
    ]
    return _table(header, rows)


def _curves(axes: Any, results: Sequence[RunResult], ylabel: str, title: str) -> None:
    for result in results:
        rewards = np.array([s.reward for s in result.steps])
        steps = np.arange(1, rewards.size + 1)
        (line,) = axes.plot(steps, rewards, alpha=0.25)
        window = min(WINDOW, rewards.size)
        smoothed = np.convolve(rewards, np.ones(window) / window, mode="valid")
        axes.plot(steps[window - 1 :], smoothed, color=line.get_color(), label=f"{result.estimator} ({window}-step mean)")
    axes.set_xlabel("step")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.set_ylim(-0.02, 1.02)
    axes.grid(alpha=0.3)
    axes.legend(loc="upper left")


def plot_reward_curves(results: Sequence[RunResult], path: Path, multi_turn: Sequence[RunResult] = ()) -> Path:
    """Save the mean reward per step of every run (faint) and its moving average over :data:`WINDOW` steps as a PNG.

    With ``multi_turn`` runs, a second panel shows them (the multi-turn environment).
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    panels = 2 if multi_turn else 1
    figure, axes = plt.subplots(1, panels, figsize=(7 * panels, 4), dpi=120, squeeze=False)
    _curves(axes[0, 0], results, "mean reward (exact match)", "Tiny Qwen2 on single-digit addition, RLLMGRPOTrainer")
    if multi_turn:
        _curves(axes[0, 1], multi_turn, "mean reward (share of right turns)", "Multi-turn environment (aliased states), rollout_func")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
