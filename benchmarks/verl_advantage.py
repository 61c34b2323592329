"""verl: ``compute_advantage`` with the ``rllm_*`` estimators vs verl's own, on identical CPU DataProtos.

Every implementation runs through ``verl.trainer.ppo.ray_trainer.compute_advantage`` on the same
``DataProto`` (``token_level_rewards`` float32 (B, T) with the reward on the last response token,
``response_mask`` int64 (B, T) as verl slices it from the attention mask, ``uid`` one uuid4 string
per prompt repeated n times, interleaved as verl's rollout repeats it). The floor is the last
operation every outcome estimator needs: one elementwise ``(B, 1) * (B, T)`` multiply.

Peak extra memory: torch's CPU allocations are read from the torch profiler
(``profile_memory=True``: each op's allocations and every free, replayed in time order, peak of
the running total since the call started); numpy's from ``tracemalloc`` (numpy reports its data
buffers to it, torch does not). The column is the sum of the two peaks (an upper bound if they
do not coincide); ``retained`` is what is still allocated when the call returns (the outputs).

Run: ``python -m benchmarks.verl_advantage [--quick]``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch

from rllm_plugins.bench.measure import peak_extra_memory  # the one measure, rllm-plugins bench's

from .report import Report, Target, script_main
from .timing import Table, format_bytes, format_ratio, format_time, measure_interleaved, page_faults_per_call

__all__ = ["make_dataproto", "peak_extra_memory", "run"]

OURS = ("rllm_grpo", "rllm_rloo", "rllm_reinforce_plus_plus_baseline")  # measured for memory too; every other outcome built-in for time
VERLS = ("grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "reinforce_plus_plus_baseline")
FLOOR = "floor: (B,1)x(B,T) multiply"
FLOOR_SUM = "floor + reward sum: sum(-1), then the multiply"
FLOOR_LENGTHS = "floor + reward sum + mask sum (estimators taking lengths)"
LEAST = "least: reward sum, then the output written in blocks (rllm_*'s write)"
TARGET_VS_VECTORIZED = 1.1
TARGET_VS_LOOPED = 10.0
TARGET_VS_FLOOR_SUM = 1.3
COLUMNS = ("rows x tokens (n)", "estimator", "time", "vs floor", "vs floor + reward sum", "vs the least", "vs grpo_vectorized", "peak extra memory", "retained")
COLUMNS += ("(B,T) float32 output", "page faults per call")


def make_dataproto(rows: int, length: int, n: int, seed: int = 0) -> Any:
    """A verl ``DataProto`` of ``rows // n`` prompts with ``n`` responses each (see the module docstring)."""
    from verl import DataProto

    rng = np.random.default_rng(seed)
    lengths = torch.from_numpy(rng.integers(1, length + 1, size=rows))
    response_mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.int64)
    token_level_rewards = torch.zeros(rows, length, dtype=torch.float32)
    token_level_rewards[torch.arange(rows), lengths - 1] = torch.from_numpy(rng.integers(0, 2, size=rows).astype(np.float32))
    uid = np.repeat(np.array([str(uuid.UUID(int=int(rng.integers(2**62)), version=4)) for _ in range(rows // n)], dtype=object), n)
    return DataProto.from_dict(tensors={"token_level_rewards": token_level_rewards, "response_mask": response_mask}, non_tensors={"uid": uid})


def outcome_names() -> tuple[str, ...]:
    """``rllm_<name>`` of every built-in outcome-level estimator, :data:`OURS` first."""
    from rllm_plugins.estimators.builtin import rllm_adv_estimators

    others = sorted(f"rllm_{spec.name}" for spec in rllm_adv_estimators() if spec.level == "outcome" and f"rllm_{spec.name}" not in OURS)
    return (*OURS, *others)


def own_floor(name: str) -> str:
    """The floor an ``rllm_*`` estimator is held to: :data:`FLOOR_LENGTHS` when it takes ``lengths`` (a second read of the mask), else :data:`FLOOR_SUM`."""
    from rllm_plugins.needs import needs_of
    from rllm_plugins.registry import get_estimator

    return FLOOR_LENGTHS if needs_of(get_estimator(name.removeprefix("rllm_")).spec, {}).lengths else FLOOR_SUM


def _rllm_available() -> bool:
    from verl.trainer.ppo import core_algos

    if not all(name in core_algos.ADV_ESTIMATOR_REGISTRY for name in OURS):
        try:  # the verl.plugins entry point is missing when the package is not installed
            from rllm_verl.registration import register_estimators_into_verl

            register_estimators_into_verl()
        except ImportError:
            return False
    return all(name in core_algos.ADV_ESTIMATOR_REGISTRY for name in OURS)


def _implementations(data: Any, available: bool) -> dict[str, Callable[[], object] | None]:
    """The floor and every estimator, each a call on ``data`` (None where not available)."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.ray_trainer import compute_advantage

    config = OmegaConf.create({"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": True, "gamma": 1.0, "lam": 1.0})
    mask = data.batch["response_mask"]
    scores = data.batch["token_level_rewards"].sum(-1)
    rewards = data.batch["token_level_rewards"]
    kept: dict[str, torch.Tensor] = {}  # like data.batch: the previous output is freed only once the new one exists

    def output() -> torch.Tensor:  # in numpy's memory, as the rllm_* path allocates its output on the CPU (huge pages advised)
        return torch.from_numpy(np.empty(tuple(mask.shape), dtype=np.float32))

    def floor() -> None:
        kept["advantages"] = torch.mul(scores.unsqueeze(-1), mask, out=output())

    def floor_lengths() -> None:
        mask.sum(-1)
        kept["advantages"] = torch.mul(rewards.sum(-1).unsqueeze(-1), mask, out=output())

    def floor_sum() -> None:
        kept["advantages"] = torch.mul(rewards.sum(-1).unsqueeze(-1), mask, out=output())

    def least() -> None:
        kept["advantages"] = write_advantages(reward_sums(rewards), mask, torch.float32)

    if available:
        from rllm_verl.compute.tokens import reward_sums, write_advantages
    impls: dict[str, Callable[[], object] | None] = {FLOOR: floor, FLOOR_SUM: floor_sum, FLOOR_LENGTHS: floor_lengths, LEAST: least if available else None}
    for name in (*outcome_names(), *VERLS):
        usable = available or not name.startswith("rllm_")
        impls[name] = partial(compute_advantage, data, adv_estimator=name, norm_adv_by_std_in_grpo=True, config=config) if usable else None
    return impls


def _memory(data: Any, fn: Callable[[], object]) -> tuple[int, int]:
    """Peak and retained extra bytes of a fresh call (no earlier output to free)."""
    for key in ("advantages", "returns"):
        data.batch.pop(key, None)
    return peak_extra_memory(fn)


def _targets(label: str, times: dict[str, float], largest: bool, quick: bool) -> list[Target]:
    ratio = times["rllm_grpo"] / times["grpo_vectorized"]
    vs_floor = {name: times[name] / times[own_floor(name)] for name in outcome_names()}
    slowest = max(vs_floor, key=vs_floor.__getitem__)
    worst = vs_floor[slowest]
    targets = [
        Target.check(f"rllm_grpo vs grpo_vectorized at {label}", ratio, TARGET_VS_VECTORIZED, quick=quick),
        Target.check(
            f"every rllm_* outcome estimator vs its floor (+ reward sum, + mask sum when taking lengths) at {label}",
            worst,
            TARGET_VS_FLOOR_SUM,
            measured=f"{format_ratio(worst)} (slowest: {slowest})",
            quick=quick,
        ),
    ]
    if largest:
        for ours, looped in (("rllm_grpo", "grpo"), ("rllm_rloo", "rloo")):
            speedup = times[looped] / times[ours]
            name = f"{ours} vs verl's looped {looped} at {label}"
            targets.append(Target.check(name, speedup, TARGET_VS_LOOPED, at_most=False, measured=f"{format_ratio(speedup)} faster", quick=quick))
    return targets


def run(quick: bool = False) -> Report:
    shapes = [(256, 64, 8)] if quick else [(4096, 1024, 8), (16384, 256, 16)]
    budget = 0.0 if quick else 1.5
    min_runs = 1 if quick else 5
    rounds = 1 if quick else 5
    available = _rllm_available()
    report = Report("verl")
    table = Table(
        "verl: compute_advantage on one CPU DataProto",
        COLUMNS,
    )
    table.notes.append(
        "floor: `torch.mul(scores.unsqueeze(-1), response_mask, out=...)`, the last op of every outcome estimator; its output is one (B,T) float32 tensor."
    )
    table.notes.append(
        "The floors keep their last output until the next one is made, as compute_advantage does with data.batch['advantages'], "
        "and allocate it in numpy's memory as the rllm_* path does on the CPU (huge pages advised): every floor and rllm_* row pays "
        "the same for fresh memory; verl's own estimators allocate theirs in torch's (a page fault per 4 KiB when freshly mapped)."
    )
    table.notes.append(
        "floor + reward sum: verl's last op after the reward sum, the reference of every outcome target but those of estimators "
        "taking lengths (below). With an int64 mask, torch casts the whole mask into a float32 temporary before it multiplies: "
        "one (B,T) write and read more than the least."
    )
    table.notes.append(
        f"{LEAST}: the token rewards summed and the output written as the rllm_* path writes it (each block of rows of the mask "
        "cast into the output, then scaled in cache): the least an outcome estimator does in torch on the CPU. What an rllm_* row "
        "adds to it ('vs the least') is its (B,) work (the uids grouped, the estimator, the checks) and verl's call."
    )
    taking_lengths = ", ".join(name for name in outcome_names() if own_floor(name) == FLOOR_LENGTHS) if available else "none measured"
    table.notes.append(
        f"floor + reward sum + mask sum: the least an estimator taking `lengths` ({taking_lengths}) must do; "
        "its target is against this row (an int64 mask read costs more than the float32 output write)."
    )
    table.notes.append("peak extra memory: torch profiler (CPU allocations and frees, replayed in order) + tracemalloc (numpy).")
    table.notes.append("retained: still allocated after the call (the outputs: verl's estimators return one tensor as both advantages and returns).")
    table.notes.append(
        "page faults per call: pages a call first touches (fresh memory from the kernel), counted after the timings and before the "
        "profiler runs; how many a row pays depends on the allocator's history in this process, which is why every report runs in a fresh one."
    )
    timed = []  # every shape timed before any is profiled: on this machine, fresh memory faulted differently once torch's profiler had run
    for rows, length, n in shapes:
        data = make_dataproto(rows, length, n)
        impls = {name: fn for name, fn in _implementations(data, available).items() if fn is not None}
        times = measure_interleaved(impls, rounds, budget, min_runs)
        faults = {name: page_faults_per_call(fn, 1 if quick else 3) for name, fn in impls.items()}
        timed.append((rows, length, n, data, impls, times, faults))
    for rows, length, n, data, impls, times, faults in timed:
        label = f"{rows:,} x {length:,} ({n})"
        memory = {name: _memory(data, fn) for name, fn in impls.items() if not name.startswith("rllm_") or name in OURS}
        output = format_bytes(rows * length * 4)
        for name in (FLOOR, FLOOR_SUM, FLOOR_LENGTHS, LEAST, *outcome_names(), *VERLS):
            if name not in impls:
                table.add(label, name, "not available", "—", "—", "—", "—", "—", "—", output, "—")
                continue
            seconds = times[name]
            peak, retained = (format_bytes(m) for m in memory[name]) if name in memory else ("—", "—")
            ratios = (format_ratio(seconds / times[base]) if base in times else "—" for base in (FLOOR, FLOOR_SUM, LEAST, "grpo_vectorized"))
            table.add(label, name, format_time(seconds), *ratios, peak, retained, output, f"{faults[name]:,.0f}")
            report.point("verl", name, rows, seconds)
        if available:
            report.targets += _targets(label, times, largest=rows == max(r for r, _, _ in shapes), quick=quick)
        else:
            report.targets.append(Target.unavailable(f"rllm_* in verl at {label}", "rllm_verl not available", "registered"))
    report.tables.append(table)
    return report


def main() -> None:
    script_main(__doc__, run, "one small DataProto, one run each (smoke test)")


if __name__ == "__main__":
    main()
