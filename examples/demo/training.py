"""Train the tiny model on the toy task with ``RLLMGRPOTrainer``, one run per estimator, recording each step."""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from rllm_trl import RLLMGRPOConfig, RLLMGRPOTrainer
from task import addition_dataset, build_task_tokenizer, exact_match_reward
from transformers import PrinterCallback, ProgressCallback, TrainerCallback

from rllm_plugins.tiny import build_tiny_model

__all__ = ["PROMPTS_PER_STEP", "RunResult", "StepRecord", "train_with_estimator"]

PROMPTS_PER_STEP = 8
NUM_GENERATIONS = 8
LEARNING_RATE = 3e-3  # high on purpose: a 75k-parameter model, a few dozen steps
HIDDEN_SIZE = 64


@dataclass(frozen=True)
class StepRecord:
    """What TRL logged for one optimizer step: the mean reward and the rLLM advantage metrics."""

    reward: float
    advantage_mean: float
    advantage_std: float
    advantage_min: float
    advantage_max: float
    fraction_zero: float

    @classmethod
    def from_logs(cls, logs: dict[str, Any], role: str = "all_groups") -> StepRecord:
        prefix = f"advantage/{role}/"
        return cls(
            reward=float(logs["reward"]),
            advantage_mean=float(logs[prefix + "mean"]),
            advantage_std=float(logs[prefix + "std"]),
            advantage_min=float(logs[prefix + "min"]),
            advantage_max=float(logs[prefix + "max"]),
            fraction_zero=float(logs[prefix + "fraction_zero"]),
        )


@dataclass
class RunResult:
    """One training run: the estimator name, its step records, its wall time in seconds."""

    estimator: str
    steps: list[StepRecord] = field(default_factory=list)
    seconds: float = 0.0


class RecordingCallback(TrainerCallback):
    """Each step's logs go into ``records``, not onto the screen."""

    def __init__(self, title: str, records: list[StepRecord]) -> None:
        super().__init__()
        self.title = title
        self.records = records

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if logs and "reward" in logs:
            self.records.append(StepRecord.from_logs(logs))


class RecordingProgressCallback(RecordingCallback, ProgressCallback):
    """TRL's progress bar, titled with the estimator (on a terminal only: TRL's ``disable_tqdm`` is set otherwise)."""

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        super().on_train_begin(args, state, control, **kwargs)
        if self.training_bar is not None:
            self.training_bar.set_description(self.title)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        RecordingCallback.on_log(self, args, state, control, logs, **kwargs)
        if self.training_bar is not None and self.records and logs and "reward" in logs:
            record = self.records[-1]
            self.training_bar.set_postfix(reward=f"{record.reward:.2f}", zero_adv=f"{record.fraction_zero:.2f}")


def demo_config(output_dir: str, estimator: str, steps: int, seed: int, **overrides: Any) -> RLLMGRPOConfig:
    """The demo's TRL settings (CPU, no saving, constant learning rate, no KL), with ``overrides``."""
    settings: dict[str, Any] = {
        "output_dir": output_dir,
        "adv_estimator": estimator,
        "max_steps": steps,
        "per_device_train_batch_size": PROMPTS_PER_STEP * NUM_GENERATIONS,
        "num_generations": NUM_GENERATIONS,
        "learning_rate": LEARNING_RATE,
        "lr_scheduler_type": "constant",
        "beta": 0.0,
        "temperature": 1.0,
        "logging_steps": 1,
        "seed": seed,
        "use_cpu": True,
        "bf16": False,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": not sys.stderr.isatty(),  # progress bars on a terminal, not in piped logs
    }
    return RLLMGRPOConfig(**{**settings, **overrides})


def train_with_estimator(estimator: str, steps: int, seed: int) -> RunResult:
    """Train a freshly built model (same ``seed``: same weights and prompts for every estimator) for ``steps`` steps.

    Nothing is saved: TRL's ``output_dir`` is a temporary directory.
    """
    tokenizer = build_task_tokenizer()
    result = RunResult(estimator)
    with tempfile.TemporaryDirectory(prefix="rllm_demo_") as scratch:
        config = demo_config(scratch, estimator, steps, seed, max_completion_length=1)  # the answer is a single token
        trainer = RLLMGRPOTrainer(
            model=build_tiny_model(tokenizer, seed=seed, hidden_size=HIDDEN_SIZE),
            reward_funcs=exact_match_reward,
            args=config,
            train_dataset=addition_dataset(steps * PROMPTS_PER_STEP, seed),
            processing_class=tokenizer,
        )
        train_and_record(trainer, estimator, result, label_width=16)
    return result


def train_and_record(trainer: Any, label: str, result: RunResult, label_width: int) -> None:
    """Train with the demo's callbacks (a titled progress bar on a terminal, else one line at the end), recording each step in ``result``."""
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    recorder = RecordingCallback if trainer.args.disable_tqdm else RecordingProgressCallback
    trainer.add_callback(recorder(f"{label:>{label_width}}", result.steps))
    start = time.perf_counter()
    trainer.train()
    result.seconds = time.perf_counter() - start
    if trainer.args.disable_tqdm:
        print(f"trained with {label}: {trainer.args.max_steps} steps in {result.seconds:.0f} s", flush=True)
