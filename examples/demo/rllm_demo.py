"""rllm-plugins demo: rLLM estimators by name in TRL's GRPOTrainer and in verl's compute_advantage, offline on a CPU.

1. Trains a tiny locally built Qwen2 on single-digit addition (``"3+4="`` -> ``"7"``, exact-match
   reward) with ``RLLMGRPOTrainer``, once per estimator, from the same weights and prompts.
2. Prints one row per estimator (reward at the start and the end, advantage statistics, share
   of zero advantages) and saves the reward curves as a PNG.
3. Trains the same way on a multi-turn environment with aliased states (``multi_turn.py``), once
   with the step-level ``gigpo`` (one advantage per turn) and once with ``grpo`` (one per episode).
4. Builds a verl ``DataProto`` of toy rollouts and runs verl's own ``compute_advantage`` with
   ``rllm_grpo``/``rllm_rloo`` and verl's ``grpo``/``rloo``/``rloo_vectorized``, row by row.

Its numbers are the same on any x86-64 CPU: ``kernels.py`` pins torch's and MKL's kernels and the thread
count before torch loads. Run it with ``make demo`` (``make demo ARGS="--steps 20"``) or ``python examples/demo/rllm_demo.py --help``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

OFFLINE_ENVIRONMENT = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TRL_EXPERIMENTAL_SILENCE": "1",
    "CUDA_VISIBLE_DEVICES": "",
    "TOKENIZERS_PARALLELISM": "false",
}

SEMANTICS = """\
How to read it: rllm_grpo divides by the population std of the group (ddof=0), verl's grpo by the
sample std (ddof=1), so for the same rewards verl's values are smaller by sqrt((n-1)/n). A group
whose rewards are all equal gets 0 everywhere. RLOO is n/(n-1) * (r - group mean) in all three; for
a group of one response rllm_rloo and verl's rloo keep the raw reward, verl's rloo_vectorized gives 0.
Every response token of a row gets the row's advantage (padding gets 0). docs/semantics.md has all formulas."""


MULTI_TURN_ESTIMATORS = ("gigpo", "grpo")
TRL_TITLE = "== TRL: RLLMGRPOTrainer, adv_estimator=<name> =="
VERL_TITLE = "== verl: compute_advantage(data, adv_estimator=<name>) on one DataProto =="
MULTI_TURN_TITLE = "== TRL multi-turn: rollout_func episodes of 3 turns, aliased observations, same weights and prompts =="
MULTI_TURN_NOTE = """\
gigpo (gamma 0.9, step_advantage_w 1.0) gives each turn its own advantage: the episode's GRPO advantage plus
the turn's discounted return normalised among the turns of its group that saw the same observation;
grpo gives every model token of an episode the episode's advantage. adv statistics of gigpo are per turn."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="rllm_demo.py",
        description=(
            "Train a tiny locally built model on single-digit addition with TRL's GRPOTrainer, once per rLLM advantage "
            "estimator chosen by name, then compare rllm_* estimators with verl's own on a verl DataProto. "
            "Fully offline, CPU only."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--steps", type=int, default=50, help="optimizer steps per estimator (8 prompts x 8 completions each)")
    parser.add_argument(
        "--estimators",
        default="grpo,rloo,median_baseline",
        help="comma-separated estimator names: built-ins or installed plugins (`rllm-plugins estimators` lists them)",
    )
    parser.add_argument(
        "--multi-turn-steps",
        type=int,
        default=40,
        help="optimizer steps of each multi-turn run (gigpo and grpo, 8 prompts x 8 episodes each); 0 skips the multi-turn part",
    )
    parser.add_argument("--output-dir", type=Path, default=Path("demo_output"), help="where the reward-curve PNG and summary.txt are written")
    parser.add_argument("--seed", type=int, default=0, help="seed of the model weights, the prompts and the sampling (the same for every estimator)")
    args = parser.parse_args(argv)
    args.estimators = [name.strip() for name in args.estimators.split(",") if name.strip()]
    if not args.estimators:
        parser.error("--estimators needs at least one name")
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    if args.multi_turn_steps < 0:
        parser.error("--multi-turn-steps must be at least 0")
    return args


def main(argv: Sequence[str] | None = None) -> int | str:
    args = parse_args(argv)
    for key, value in OFFLINE_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    from kernels import PINNED_KERNELS, pin_kernels

    pin_kernels()  # before anything loads torch: the same numbers on any x86-64 CPU
    print(f"kernels pinned (examples/demo/kernels.py): {' '.join(f'{key}={value}' for key, value in PINNED_KERNELS.items())}")
    start = time.perf_counter()

    # imported here: the offline settings must come first, and --help stays instant
    from rllm_plugins.registry import get_estimator

    for name in args.estimators:
        try:
            get_estimator(name)  # an unknown name fails now, with the known ones listed, not after the first run
        except ValueError as error:
            return f"rllm_demo.py: --estimators: {error}"

    from multi_turn import train_multi_turn
    from report import comparison_table, plot_reward_curves, training_table
    from training import train_with_estimator
    from verl_comparison import compare_with_verl

    results = []
    for name in args.estimators:
        results.append(train_with_estimator(name, args.steps, args.seed))
    sections = [f"{TRL_TITLE}\n{training_table(results)}"]  # each table under its title, printed and in summary.txt
    multi_turn = [train_multi_turn(name, args.multi_turn_steps, args.seed) for name in MULTI_TURN_ESTIMATORS] if args.multi_turn_steps else []
    plot = plot_reward_curves(results, args.output_dir / "reward_curves.png", multi_turn)
    print(f"\n{sections[-1]}\nreward curves: {plot}\n")
    if multi_turn:
        sections.append(f"{MULTI_TURN_TITLE}\n{training_table(multi_turn, unit='turns (gigpo) or episodes (grpo)')}\n{MULTI_TURN_NOTE}")
        print(f"{sections[-1]}\n")

    sections.append(f"{VERL_TITLE}\n{comparison_table(compare_with_verl())}")
    print(f"{sections[-1]}\n\n{SEMANTICS}\n")

    (args.output_dir / "summary.txt").write_text("\n\n".join([*sections, SEMANTICS]) + "\n")
    print(f"summary: {args.output_dir / 'summary.txt'}; total {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
