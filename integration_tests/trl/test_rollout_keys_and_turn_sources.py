"""A step-level run says where its turns come from: near misses of the keys it reads refused, one line at the first step, the single-turn warning.

The rollout is a fixed two-turn episode per prompt (action, observation, action; ``env_mask`` 1 0 1), so what is
checked is only what the trainer reads and says, in real steps of ``RLLMGRPOTrainer``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset
from rllm_trl import RLLMGRPOConfig, RLLMGRPOTrainer
from rllm_trl.rollouts import check_rollout_output
from trl.chat_template_utils import qwen2_5_chat_template

from rllm_plugins.tiny import build_tiny_model, build_tiny_tokenizer

from .conftest import tool_path

LOGGER = "rllm_trl.trainer"


def two_turns(**extra: Callable[[int], Any]) -> Callable[..., dict[str, list[Any]]]:
    """A rollout_func: per prompt ``[5, 6, 7]`` with env_mask ``[1, 0, 1]``; each extra key's value made from the completion's index."""

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        count = len(prompts)
        out: dict[str, list[Any]] = {
            "prompt_ids": [[4] for _ in range(count)],
            "completion_ids": [[5, 6 + b % 2, 7] for b in range(count)],
            "logprobs": [[-1.0, 0.0, -1.0] for _ in range(count)],
            "env_mask": [[1, 0, 1] for _ in range(count)],
            "score": [float(b % 3) for b in range(count)],
        }
        out.update({key: [make(b) for b in range(count)] for key, make in extra.items()})
        return out

    return rollout


def score_reward(completions: list[Any], score: list[float], **_: Any) -> list[float]:
    return list(score)


@pytest.fixture
def trainer_with(tokenizer: Any, tmp_path: Path, make_config: Callable[..., Any]) -> Callable[..., RLLMGRPOTrainer]:
    def make(rollout: Callable[..., Any] | None, estimator: str = "gigpo", **trainer_kwargs: Any) -> RLLMGRPOTrainer:
        args = make_config(tmp_path, RLLMGRPOConfig, reward_weights=None, max_steps=2, adv_estimator=estimator)
        processing_class = trainer_kwargs.pop("processing_class", tokenizer)
        return RLLMGRPOTrainer(
            model=build_tiny_model(processing_class, seed=0),
            reward_funcs=trainer_kwargs.pop("reward_funcs", [score_reward]),
            args=args,
            train_dataset=trainer_kwargs.pop("train_dataset", Dataset.from_dict({"prompt": ["go", "run"] * 8})),
            processing_class=processing_class,
            rollout_func=rollout,
            **trainer_kwargs,
        )

    return make


# ---------------------------------------------------------------- near misses of the keys a step-level run reads


@pytest.mark.parametrize(
    "key, closest",
    [("turn_reward", "turn_rewards"), ("TurnRewards", "turn_rewards"), ("step_rewards", "turn_rewards"), ("anchor_state", "anchor_states")],
)
def test_a_near_miss_of_a_step_level_key_fails_the_first_step_naming_the_key(trainer_with, key, closest):
    trainer = trainer_with(two_turns(**{key: lambda b: [0.0, 1.0]}))
    with pytest.raises(ValueError, match=rf"rollout_func output: key '{key}' is not one TRL or rllm_trl reads, and is close to '{closest}'") as raised:
        trainer.train()
    assert f"Rename it to '{closest}'" in str(raised.value) and "per model turn" in str(raised.value)


@pytest.mark.parametrize(
    "output, step_level, closest",
    [
        ({"env_masks": [[1]]}, False, "env_mask"),
        ({"tool_mask": [[1]]}, False, "env_mask"),  # TRL's internal name: TRL would forward it and train on every token
        ({"logprob_token_id": [[1]]}, False, "logprob_token_ids"),
        ({"turn_reward": [[1.0]]}, True, "turn_rewards"),
        ({"anchors_states": [["s"]]}, True, "anchor_states"),
    ],
)
def test_near_misses_of_every_read_key_are_refused(output, step_level, closest):
    base = {"prompt_ids": [[1]], "completion_ids": [[2]], "logprobs": [[0.0]]}
    with pytest.raises(ValueError, match=rf"is close to '{closest}'"):
        check_rollout_output({**base, **output}, step_level=step_level)


@pytest.mark.parametrize(
    "extra, step_level",
    [
        ({"score": [1.0], "found": [0.0], "rewards": [1.0], "anchors": ["a"], "answer": ["4"]}, True),  # far from every read key
        ({"turn_rewards": [[1.0]], "turn_reward": [1.0]}, True),  # next to the key it resembles: the reward functions' own
        ({"turn_reward": [1.0], "anchor_state": ["a"]}, False),  # an outcome-level run reads neither
    ],
)
def test_keys_far_from_the_read_ones_or_not_read_pass(extra, step_level):
    assert check_rollout_output({"prompt_ids": [[1]], "completion_ids": [[2]], "logprobs": [[0.0]], **extra}, step_level=step_level) is None


# ---------------------------------------------------------------- one line, at the first step


DEFAULT_SOURCES = (
    "adv_estimator='gigpo': turns from the rollout_func's env_mask; step rewards: the completion's reward on its last turn, 0 before; "
    "anchor states: turn 0 the completion's prompt ids, turn k the environment tokens right before it"
)


def source_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and "step rewards:" in r.getMessage()]


@pytest.mark.parametrize(
    "extra, expected",
    [
        ({}, DEFAULT_SOURCES),
        (
            {"turn_rewards": lambda b: [0.5, 0.5], "anchor_states": lambda b: ["start", f"seen {b % 2}"]},
            "adv_estimator='gigpo': turns from the rollout_func's env_mask; step rewards: the rollout_func's turn_rewards on 8 of 8 "
            "completions; anchor states: the rollout_func's anchor_states on 8 of 8 completions",
        ),
        (
            {"turn_rewards": lambda b: [0.5, 0.5] if b < 3 else None},
            "step rewards: the rollout_func's turn_rewards on 3 of 8 completions, else the completion's reward on its last turn, 0 before",
        ),
    ],
)
def test_the_first_step_logs_where_each_turns_reward_and_anchor_came_from_once(trainer_with, caplog, extra, expected):
    trainer = trainer_with(two_turns(**extra))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        trainer.train()
    lines = source_lines(caplog)
    assert len(lines) == 1 and expected in lines[0], lines  # two steps, one line


def test_step_reinforce_reads_no_anchor_states_and_the_line_says_none(trainer_with, caplog):
    trainer = trainer_with(two_turns(), estimator="step_reinforce")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        trainer.train()
    (line,) = source_lines(caplog)
    assert line.startswith("adv_estimator='step_reinforce': turns from the rollout_func's env_mask; step rewards:") and "anchor" not in line


# ---------------------------------------------------------------- step-level keys a run does not read, an env_mask TRL does not read


def unread_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "rllm_trl.rollouts" and "returned and not read" in r.getMessage()]


@pytest.mark.parametrize(
    "estimator, unread, why",
    [
        ("grpo", ["turn_rewards", "anchor_states"], "adv_estimator='grpo' is outcome-level"),
        ("rloo", ["turn_rewards", "anchor_states"], "adv_estimator='rloo' is outcome-level"),
        ("turn_grpo", ["anchor_states"], "adv_estimator='turn_grpo' with these options compares no anchor states"),
        ("step_reinforce", ["anchor_states"], "adv_estimator='step_reinforce' with these options compares no anchor states"),
        ("gigpo", [], ""),
    ],
)
def test_step_level_keys_a_run_does_not_read_are_said_once(trainer_with, caplog, estimator, unread, why):
    trainer = trainer_with(two_turns(turn_rewards=lambda b: [0.5, 0.5], anchor_states=lambda b: ["start", f"seen {b % 2}"]), estimator=estimator)
    with caplog.at_level(logging.WARNING, logger="rllm_trl.rollouts"):
        trainer.train()
    warnings = unread_warnings(caplog)
    if not unread:
        assert warnings == []
        return
    (warning,) = warnings  # two steps, one warning
    assert warning.startswith(f"rollout_func output: {' and '.join(unread)} returned and not read, as {why}"), warning


def test_a_run_that_returns_no_unread_key_is_told_nothing(trainer_with, caplog):
    trainer = trainer_with(two_turns(), estimator="grpo")
    with caplog.at_level(logging.WARNING, logger="rllm_trl.rollouts"):
        trainer.train()
    assert unread_warnings(caplog) == []


def lookup(word: str) -> str:
    """Look a word up.

    Args:
        word: The word to look up.
    """
    return word


@tool_path("tools")
def test_an_env_mask_next_to_trl_tools_is_refused_since_trl_replaces_it(trainer_with):
    template_tokenizer = build_tiny_tokenizer(["go run"])
    template_tokenizer.chat_template = qwen2_5_chat_template
    trainer = trainer_with(two_turns(), tools=[lookup], processing_class=template_tokenizer)
    with pytest.raises(ValueError, match=r"env_mask is returned, but the trainer also has tools \['lookup'\]") as raised:
        trainer.train()
    assert "passes env_mask to the reward functions only" in str(raised.value)


@pytest.mark.parametrize("key", ["tool_mask", "env_masks"])
def test_a_near_miss_of_env_mask_next_to_tools_gets_the_tools_advice_not_a_rename(key):
    from types import SimpleNamespace

    from rllm_trl.rollouts import checked_rollout_func

    def rollout(prompts, trainer):
        return {"prompt_ids": [[1]], "completion_ids": [[2, 3]], "logprobs": [[0.0, 0.0]], key: [[1, 1]]}

    with pytest.raises(ValueError, match=rf"{key} is returned, but the trainer also has tools \['lookup'\]") as raised:
        checked_rollout_func(rollout)(["go"], SimpleNamespace(tools=[lookup], eos_token_ids=[2]))
    assert "Rename" not in str(raised.value)
    with pytest.raises(ValueError, match=rf"key '{key}' is not one TRL or rllm_trl reads, and is close to 'env_mask'"):
        checked_rollout_func(rollout)(["go"], SimpleNamespace(tools=[], eos_token_ids=[2]))  # without tools: rename it


# ---------------------------------------------------------------- the single-turn warning names what the run has


class NoTools:
    """An ``environment_factory`` environment without tools: only ``reset``."""

    def reset(self, **_: Any) -> None:
        return None


def length_reward(completions: list[Any], **_: Any) -> list[float]:
    return [float(len(str(c)) % 3) for c in completions]


def single_turn_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and "carry no tool_mask" in r.getMessage()]


@pytest.mark.parametrize(
    "path, has",
    [
        ("plain", "the trainer has no tools, environment_factory or rollout_func"),
        ("rollout_func", "the rollout_func returns no env_mask"),
        pytest.param(
            "environment_factory",
            "the environment_factory's environments have no tools (no public method besides reset and get_reward)",
            marks=tool_path("environment_factory"),
        ),
    ],
)
def test_the_single_turn_warning_names_what_the_run_has_and_what_gigpo_computes(trainer_with, tokenizer, caplog, path, has):
    kwargs: dict[str, Any] = {"reward_funcs": [length_reward]}
    rollout = None
    if path == "rollout_func":
        single = two_turns()

        def rollout(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
            return {key: value for key, value in single(prompts, trainer).items() if key != "env_mask"}
    elif path == "environment_factory":
        template_tokenizer = build_tiny_tokenizer(["go run"])
        template_tokenizer.chat_template = qwen2_5_chat_template
        kwargs.update(environment_factory=NoTools, processing_class=template_tokenizer)
        kwargs["train_dataset"] = Dataset.from_dict({"prompt": [[{"role": "user", "content": "go"}]] * 16})
    trainer = trainer_with(rollout, **kwargs)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        trainer.train()
    (warning,) = single_turn_warnings(caplog)
    assert f"the completions carry no tool_mask: {has}" in warning
    assert "gigpo = (1 + step_advantage_w) x grpo" in warning and "as an outcome-level estimator does" not in warning


# ---------------------------------------------------------------- what the pages say


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("page", ["docs/reliability.md", "docs/trl.md", "docs/turn_level.md"])
def test_every_near_miss_a_page_names_is_refused_and_every_far_key_passes(page):
    from rllm_trl.rollouts import CUTOFF, STEP_LEVEL_KEYS, TRL_KEYS

    row = next(line for line in (ROOT / page).read_text().splitlines() if line.startswith("| TRL: a `rollout_func` key") or "a near miss of one TRL" in line)
    near, _, far = row.partition("far from every read one")
    named = [key for key in re.findall(r"`(\w+)`", near) if key not in {**TRL_KEYS, **STEP_LEVEL_KEYS} and key not in ("rollout_func", "ValueError")]
    assert len(named) >= 4, row
    base = {"prompt_ids": [[1]], "completion_ids": [[2]], "logprobs": [[0.0]]}
    for key in named:
        with pytest.raises(ValueError, match="is close to"):
            check_rollout_output({**base, key: [[1]]}, step_level=True)
    for key in re.findall(r"`(\w+)`", far):
        assert check_rollout_output({**base, key: [[1]]}, step_level=True) is None, key
    if "difflib ratio" in row:
        assert f"difflib ratio ≥ {CUTOFF}" in row


def test_the_trl_page_quotes_the_first_step_line_as_it_is_logged():
    page = (ROOT / "docs" / "trl.md").read_text()
    quoted = re.search(r"\n  `(adv_estimator='gigpo': turns from .*?)`\.", page).group(1)
    assert quoted == DEFAULT_SOURCES
