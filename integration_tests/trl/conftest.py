"""Shared pieces of the TRL tests: offline environment, a tiny local model, reward functions, a recording trainer."""

from __future__ import annotations

import os

for _key, _value in {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TRL_EXPERIMENTAL_SILENCE": "1",
    "CUDA_VISIBLE_DEVICES": "",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ.setdefault(_key, _value)

from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from rllm_trl import RLLMGRPOConfig, RLLMGRPOTrainer, versions  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from rllm_plugins.registry import get_rllm_adv_estimator  # noqa: E402
from rllm_plugins.tiny import build_tiny_model, build_tiny_tokenizer  # noqa: E402

PROMPTS = ["1+1=", "2+3=", "the cat", "a b c", "hello", "7*6=", "so far", "abcab"]
CORPUS = [*PROMPTS, "the quick brown fox jumps over the lazy dog 0123456789 + - * = ?", "abc abc aab bba cab"]


def tool_path(argument: str) -> pytest.MarkDecorator:
    """Skip where the installed TRL and transformers lack the multi-turn path ``argument`` (``tools``, ``environment_factory``,
    ``rollout_func``); the reason is ``rllm_trl.versions``' (what is missing and what to install)."""
    problem = versions.tool_path_problem(next(path for path in versions.TOOL_PATHS if path.argument == argument))
    return pytest.mark.skipif(problem is not None, reason=problem or "")


def reward_length(completions: list[str], **_: Any) -> list[float]:
    """Characters in the completion, scaled."""
    return [len(c) / 8.0 for c in completions]


def reward_letter_a(completions: list[str], **_: Any) -> list[float]:
    """How often 'a' appears."""
    return [float(c.count("a")) for c in completions]


def multiply(a: int, b: int) -> int:
    """
    Multiplies two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The product of the two integers.
    """
    return a * b


class Calculator:
    """An ``environment_factory`` environment for TRL's tool loop: its public method ``multiply`` is the tool."""

    def reset(self, **_: Any) -> None:
        return None

    def multiply(self, a: int, b: int) -> int:
        """
        Multiplies two integers.

        Args:
            a: The first integer.
            b: The second integer.

        Returns:
            The product of the two integers.
        """
        return a * b


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    return build_tiny_tokenizer(CORPUS)


@pytest.fixture(scope="session")
def prompt_dataset() -> Dataset:
    return Dataset.from_dict({"prompt": PROMPTS, "role": ["solver", "judge"] * (len(PROMPTS) // 2)})


def training_args(output_dir: Path, config_class: type = RLLMGRPOConfig, **overrides: Any) -> Any:
    """A CPU config: groups of 4, 8 completions per step, 2 steps, 8 tokens per completion."""
    kwargs: dict[str, Any] = {
        "output_dir": str(output_dir),
        "use_cpu": True,
        "bf16": False,
        "gradient_checkpointing": False,
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "max_completion_length": 8,
        "max_steps": 2,
        "learning_rate": 0.1,
        "beta": 0.0,
        "report_to": "none",
        "save_strategy": "no",
        "logging_steps": 1,
        "shuffle_dataset": False,
        "disable_tqdm": True,
        "seed": 0,
        "reward_weights": [1.0, 0.5],
    }
    kwargs.update(overrides)
    return config_class(**kwargs)


def recording(base: type) -> type:
    """``base`` plus a record of what each generation saw: gathered rewards, completion lengths, advantages used."""

    class Recording(base):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.records: list[dict[str, Any]] = []

        def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> torch.Tensor:
            rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            self.records.append({"rewards_per_func": rewards.detach().clone(), "lengths": [len(ids) for ids in completion_ids_list]})
            return rewards

        def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
            output = super()._generate_and_score_completions(inputs)
            self.records[-1].update(advantages=output["advantages"].detach().clone(), mode="train" if self.model.training else "eval")
            return output

    Recording.__name__ = f"Recording{base.__name__}"
    return Recording


RecordingRLLMTrainer = recording(RLLMGRPOTrainer)
RecordingGRPOTrainer = recording(GRPOTrainer)


@pytest.fixture
def make_trainer(tokenizer: Any, prompt_dataset: Dataset, tmp_path: Path) -> Callable[..., Any]:
    """Build a recording trainer (TRL's own GRPOTrainer when ``stock``) on a fresh tiny model (seed 0)."""

    def make(stock: bool = False, reward_funcs: list[Any] | None = None, dataset: Dataset | None = None, **overrides: Any) -> Any:
        trainer_class = RecordingGRPOTrainer if stock else RecordingRLLMTrainer
        args = training_args(tmp_path, GRPOConfig if stock else RLLMGRPOConfig, **overrides)
        return trainer_class(
            model=build_tiny_model(tokenizer, seed=0),
            reward_funcs=reward_funcs or [reward_length, reward_letter_a],
            args=args,
            train_dataset=dataset if dataset is not None else prompt_dataset,
            processing_class=tokenizer,
        )

    return make


def reference_advantages(rewards_per_func: torch.Tensor, weights: list[float], num_generations: int, estimator: str, **kwargs: Any) -> np.ndarray:
    """The core list-form estimator on the scorable rows of each group of ``num_generations``; 0 for unscorable rows.

    The combination is written out here (float32 weighted NaN-sum, all-NaN rows unscorable), independent of ``rllm_trl``.
    """
    per_func = rewards_per_func.cpu().numpy().astype(np.float32)
    unscorable = np.isnan(per_func).all(axis=1)
    combined = np.nansum(per_func * np.asarray(weights, dtype=np.float32), axis=1).astype(np.float64)
    lengths = kwargs.pop("lengths", None)
    groups, length_groups, rows = [], [], []
    for start in range(0, combined.size, num_generations):
        keep = [i for i in range(start, start + num_generations) if not unscorable[i]]
        groups.append(combined[keep])
        rows.extend(keep)
        if lengths is not None:
            length_groups.extend(np.asarray(lengths, dtype=np.float64)[keep])
    if lengths is not None:
        kwargs["lengths"] = np.asarray(length_groups)
    by_group, _ = get_rllm_adv_estimator(estimator)(rewards=groups, **kwargs)
    out = np.zeros(combined.size)
    out[rows] = np.concatenate([np.asarray(a, dtype=np.float64) for a in by_group])
    return out


def parameters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


@pytest.fixture(scope="session")
def expected_advantages() -> Callable[..., np.ndarray]:
    """:func:`reference_advantages`, the independent computation the tests compare with."""
    return reference_advantages


@pytest.fixture(scope="session")
def make_config() -> Callable[..., Any]:
    """:func:`training_args`: the CPU config, of a given class, with overrides."""
    return training_args


@pytest.fixture(scope="session")
def default_reward_funcs() -> list[Callable[..., list[float]]]:
    """The reward functions ``make_trainer`` uses unless told otherwise (weights 1.0, 0.5)."""
    return [reward_length, reward_letter_a]


@pytest.fixture(scope="session")
def snapshot() -> Callable[[torch.nn.Module], dict[str, torch.Tensor]]:
    """:func:`parameters`: a copy of a model's parameters."""
    return parameters
