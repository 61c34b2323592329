"""The log-log plot of the benchmark series: time vs trajectories, one line per implementation."""

from __future__ import annotations

from pathlib import Path

from .report import Report

__all__ = ["save_plot"]

TITLES = {
    "core": "Core estimators (groups of 8)",
    "trl": "TRL advantage step (groups of 8)",
    "verl": "verl compute_advantage (4M tokens)",
}


def save_plot(reports: list[Report], path: Path) -> None:
    """One log-log panel per series group of ``reports`` (seconds vs trajectories), saved as PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(panel, lines) for report in reports for panel, lines in report.series.items()]
    if not panels:
        raise ValueError("no series to plot: run at least one benchmark first")
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.5), squeeze=False)
    for ax, (panel, lines) in zip(axes[0], panels, strict=True):
        for label, points in lines.items():
            xs, ys = zip(*sorted(points), strict=True)
            ax.plot(xs, ys, marker="o", linestyle="--" if "ours" not in label and "rllm_" not in label else "-", label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("trajectories (rows)")
        ax.set_ylabel("time per call (s)")
        ax.set_title(TITLES.get(panel, panel))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
