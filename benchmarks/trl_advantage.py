"""TRL: the adapter's advantage step vs TRL's inline computation on the same gathered rewards.

TRL 1.16's ``GRPOTrainer._generate_and_score_completions`` computes advantages inline from the
gathered ``rewards_per_func`` ``(N, F)``: weighted ``nansum``, unscorable rows (every function
returned None) set to NaN, NaN-aware group mean and sample std over ``view(-1, G)``,
``/(std + 1e-4)``, ``nan_to_num``. That formula is reproduced below (``trl_inline``). The
adapter's step is ``prepare_batch`` + ``compute_advantages`` from ``rllm_trl.outcome`` and
the float32 tensor the mixin hands back; with ``trl_grpo`` it gives TRL's numbers.

Run: ``python -m benchmarks.trl_advantage [--quick]``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import torch

from .report import Report, Target, script_main
from .timing import Table, format_ratio, format_time, measure, measure_interleaved

__all__ = ["run", "trl_inline"]

TARGET_RATIO = 2.0
NUM_GENERATIONS = 8
NUM_FUNCS = 2


def _nanstd(tensor: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """``trl.trainer.utils.nanstd`` (TRL 1.16): NaN-aware sample std, NaN where fewer than 2 values."""
    mean = torch.nanmean(tensor, dim=dim, keepdim=True)
    variance = torch.nanmean((tensor - mean) ** 2, dim=dim, keepdim=True)
    count = torch.sum(~torch.isnan(tensor), dim=dim, keepdim=True)
    correction = count / (count - 1)
    correction = torch.where(count > 1, correction, torch.full_like(correction, float("nan")))
    variance *= correction
    std = torch.sqrt(variance)
    return std.squeeze(dim) if dim is not None else std.squeeze()


def trl_inline(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor, num_generations: int) -> torch.Tensor:
    """TRL 1.16's inline advantages, ``scale_rewards="group"``, ``multi_objective_aggregation="sum_then_normalize"``."""
    unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)
    rewards = (rewards_per_func * reward_weights.unsqueeze(0)).nansum(dim=1)
    rewards[unscorable_mask] = torch.nan
    mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations), dim=1)
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(num_generations, dim=0)
    std_rewards = _nanstd(rewards.view(-1, num_generations), dim=1)
    std_rewards = std_rewards.repeat_interleave(num_generations, dim=0)
    advantages = (rewards - mean_grouped_rewards) / (std_rewards + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


def _adapter_step() -> Callable[..., torch.Tensor] | None:
    """The adapter's step as one callable, or None when ``rllm_trl.outcome`` lacks it."""
    try:
        from rllm_trl.outcome import compute_advantages, prepare_batch
    except ImportError:
        return None

    def step(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor, num_generations: int, lengths: torch.Tensor, estimator: str) -> torch.Tensor:
        batch = prepare_batch(rewards_per_func, reward_weights, num_generations, lengths=lengths)
        return torch.as_tensor(compute_advantages(batch, estimator), dtype=torch.float32)

    return step


def _rewards(rng: np.random.Generator, n: int, unscorable: float) -> torch.Tensor:
    """``(n, F)`` float32 rewards: a 0/1 correctness reward and a graded one; ``unscorable`` rows all NaN, 5% single NaNs."""
    correct = rng.integers(0, 2, size=n).astype(np.float32)
    graded = rng.random(n).astype(np.float32)
    graded[rng.random(n) < 0.05] = np.nan
    rewards = np.stack([correct, graded], axis=1)
    rewards[rng.random(n) < unscorable] = np.nan
    return torch.from_numpy(rewards)


def run(quick: bool = False) -> Report:
    sizes = [256] if quick else [256, 1024, 4096, 16384, 65536]
    budget = 0.0 if quick else 1.5
    min_runs = 1 if quick else 5
    rounds = 1 if quick else 5
    rng = np.random.default_rng(0)
    weights = torch.tensor([1.0, 0.5])
    step = _adapter_step()
    report = Report("trl")
    table = Table(
        f"TRL: advantage step on the gathered rewards (G = {NUM_GENERATIONS}, {NUM_FUNCS} reward functions)",
        ["N", "unscorable rows", "TRL inline", "ours (trl_grpo)", "ours (grpo)", "trl_grpo / TRL", "grpo / TRL"],
    )
    table.notes.append(
        "TRL inline: TRL 1.16's formula from grpo_trainer.py (torch, float32). ours: rllm_trl.outcome.prepare_batch + "
        "compute_advantages + the float32 tensor the mixin returns; trl_grpo reproduces TRL's numbers (checked), grpo is rLLM's GRPO."
    )
    worst = 0.0
    for n in sizes:
        for unscorable in (0.0, 0.01):
            rewards_per_func = _rewards(rng, n, unscorable)
            lengths = torch.from_numpy(rng.integers(1, 1024, size=n))
            inline = partial(trl_inline, rewards_per_func, weights, NUM_GENERATIONS)
            if step is None:
                t_trl = measure(inline, budget, min_runs).median_s
                table.add(f"{n:,}", f"{unscorable:.0%}", format_time(t_trl), "not available", "not available", "—", "—")
                continue
            expected = trl_inline(rewards_per_func, weights, NUM_GENERATIONS)
            got = step(rewards_per_func, weights, NUM_GENERATIONS, lengths, "trl_grpo")
            if not torch.allclose(got, expected, rtol=1e-4, atol=1e-4):
                raise AssertionError(f"trl_grpo differs from TRL's inline advantages by up to {float((got - expected).abs().max()):g} at N={n}")
            ours = {name: partial(step, rewards_per_func, weights, NUM_GENERATIONS, lengths, name) for name in ("trl_grpo", "grpo")}
            times = measure_interleaved({"TRL": inline, **ours}, rounds, budget, min_runs)
            t_trl = times["TRL"]
            if unscorable == 0.0:
                report.point("trl", "TRL inline (torch)", n, t_trl)
                report.point("trl", "ours, trl_grpo (numpy)", n, times["trl_grpo"])
            worst = max(worst, times["trl_grpo"] / t_trl, times["grpo"] / t_trl)
            table.add(
                f"{n:,}", f"{unscorable:.0%}", format_time(t_trl), format_time(times["trl_grpo"]), format_time(times["grpo"]),
                format_ratio(times["trl_grpo"] / t_trl), format_ratio(times["grpo"] / t_trl),
            )  # fmt: skip
    report.tables.append(table)
    if step is None:
        report.targets.append(Target.unavailable("TRL adapter step vs TRL inline", "rllm_trl.outcome not available", f"≤ {TARGET_RATIO:g}x"))
    else:
        report.targets.append(Target.check("TRL adapter step vs TRL inline (worst N)", worst, TARGET_RATIO, quick=quick))
    return report


def main() -> None:
    script_main(__doc__, run, "one small size, one run each (smoke test)")


if __name__ == "__main__":
    main()
