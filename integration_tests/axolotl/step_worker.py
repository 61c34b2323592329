"""One real axolotl GRPO run on CPU per ``rllm`` block given on the command line (JSON), in this process: prints, per run, a JSON line
with the trainer's class, the gathered rewards, the advantages the step trained on and its log. Run by ``test_training.py``.

A tiny Qwen2 and its tokenizer (``rllm_plugins.tiny``) are saved to a temp folder, the YAML's ``base_model``; nothing is downloaded.
"""

from __future__ import annotations

import os

for _key, _value in {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "AXOLOTL_DO_NOT_TRACK": "1",
    "WANDB_DISABLED": "true",
    "CUDA_VISIBLE_DEVICES": "",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ.setdefault(_key, _value)

import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import yaml  # noqa: E402

HERE = Path(__file__).resolve().parent
PROMPTS = ["1+1=", "2+3=", "the cat", "a b c", "hello", "7*6=", "so far", "abcab"]


def config(work: Path, block: dict[str, Any] | None, plugins: bool = True) -> dict[str, Any]:
    """The axolotl YAML of the run (as a dict): GRPO, 2 prompts x 4 completions of 4 tokens, one step."""
    cfg: dict[str, Any] = {
        "base_model": str(work / "model"),
        "rl": "grpo",
        "trl": {"num_generations": 4, "max_completion_length": 4, "reward_funcs": ["rewards_for_tests.reward_length"], "beta": 0.0},
        "datasets": [{"path": str(work / "data.jsonl"), "ds_type": "json", "split": "train"}],
        "dataset_prepared_path": str(work / "prepared"),
        "dataset_num_proc": 1,
        "micro_batch_size": 8,
        "gradient_accumulation_steps": 1,
        "max_steps": 1,
        "num_epochs": 1,
        "learning_rate": 1e-3,
        "sequence_len": 64,
        "output_dir": str(work / "out"),
        "save_strategy": "no",
        "bf16": False,
        "fp16": False,
        "tf32": False,
        "logging_steps": 1,
        "seed": 0,
    }
    if plugins:
        cfg["plugins"] = ["rllm_axolotl.RLLMAdvantagePlugin"]
    if block is not None:
        cfg["rllm"] = block
    return cfg


def prepare(work: Path) -> None:
    from rllm_plugins.tiny import build_tiny_model, build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer([*PROMPTS, "the quick brown fox jumps over the lazy dog 0123456789"])
    build_tiny_model(tokenizer).save_pretrained(work / "model")
    tokenizer.save_pretrained(work / "model")
    with open(work / "data.jsonl", "w", encoding="utf-8") as f:
        for prompt in PROMPTS * 4:
            f.write(json.dumps({"prompt": prompt}) + "\n")


def run(work: Path, block: dict[str, Any]) -> dict[str, Any]:
    from axolotl.cli.config import load_cfg
    from axolotl.common.datasets import load_preference_datasets
    from axolotl.train import train

    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(config(work, block)))
    cfg = load_cfg(str(path))
    _, _, trainer = train(cfg=cfg, dataset_meta=load_preference_datasets(cfg=cfg))
    batch = trainer.last_reward_batch
    return {
        "trainer": [c.__name__ for c in type(trainer).__mro__[:3]],
        "rewards": batch.rewards.tolist(),
        "num_generations": batch.num_generations,
        "advantages": trainer.last_advantages.tolist(),
        "provenance": trainer.provenance_line(),
        "log": {k: v for k, v in trainer.state.log_history[0].items() if isinstance(v, (int, float, str))},
    }


def main() -> None:
    sys.path.insert(0, str(HERE))  # the reward functions' module
    for index, block in enumerate(json.loads(sys.argv[1])):
        work = Path(tempfile.mkdtemp(prefix=f"rllm_axolotl_{index}_"))
        prepare(work)
        print("RESULT " + json.dumps(run(work, block)), flush=True)


if __name__ == "__main__":  # axolotl's dataset preparation starts processes by spawning: they import this module
    main()
