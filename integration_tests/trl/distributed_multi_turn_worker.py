"""One rank of the two-process multi-turn test (``torchrun --nproc_per_node=2``): 2 steps of ``gigpo``, records to ``<out>/rank<k>.json``.

6 completions per process, groups of 4: group 1 has rows 4-5 on rank 0 and rows 6-7 on rank 1, so
the anchor groups of group 1 mix the two ranks' turns. Episodes come from a ``rollout_func``: up to 3
turns of one sampled token, each answered by one of two observation tokens by the action's parity;
an action divisible by 3 after the first turn ends the episode (2 or 3 turns).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1", "CUDA_VISIBLE_DEVICES": ""}
for key, value in OFFLINE.items():
    os.environ.setdefault(key, value)

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from rllm_trl import RLLMGRPOConfig, RLLMGRPOTrainer  # noqa: E402
from worker_exit import leave  # noqa: E402  (beside this script)

from rllm_plugins.tiny import build_tiny_model, build_tiny_tokenizer  # noqa: E402

PROMPTS = ["go", "run", "the cat", "a b c", "hello", "so far"]
MAX_TURNS = 3


def rollout(prompts: list[str], trainer: Any) -> dict[str, Any]:
    tokenizer, model = trainer.processing_class, trainer.model
    observations = [tokenizer.convert_tokens_to_ids("a"), tokenizer.convert_tokens_to_ids("b")]
    out: dict[str, list[Any]] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [], "score": []}
    for prompt in prompts:
        prompt_ids = tokenizer(prompt)["input_ids"]
        completion: list[int] = []
        logprobs: list[float] = []
        env_mask: list[int] = []
        actions: list[int] = []
        for turn in range(MAX_TURNS):
            with torch.no_grad():
                logp = torch.log_softmax(model(torch.tensor([prompt_ids + completion])).logits[0, -1].float(), dim=-1)
            action = int(torch.multinomial(logp.exp(), 1))
            completion.append(action)
            logprobs.append(float(logp[action]))
            env_mask.append(1)
            actions.append(action)
            if turn == MAX_TURNS - 1 or (turn > 0 and action % 3 == 0):
                break
            completion.append(observations[action % 2])
            logprobs.append(0.0)
            env_mask.append(0)
        out["prompt_ids"].append(prompt_ids)
        out["completion_ids"].append(completion)
        out["logprobs"].append(logprobs)
        out["env_mask"].append(env_mask)
        out["score"].append(sum(a % 2 == 0 for a in actions) / MAX_TURNS)
    return out


def score_reward(completions: list[Any], score: list[float], **_: Any) -> list[float]:
    return list(score)


class RecordingTrainer(RLLMGRPOTrainer):
    records: list[dict[str, Any]]

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        self.records.append(
            {
                "completion_ids": output["completion_ids"].tolist(),
                "model_tokens": (output["completion_mask"] * output["tool_mask"]).tolist(),
                "advantages": output["advantages"].tolist(),
                "rewards": self.last_reward_batch.rewards.tolist(),
            }
        )
        return output


def main(out_dir: Path) -> None:
    tokenizer = build_tiny_tokenizer([*PROMPTS, "the quick brown fox jumps over the lazy dog 0123456789", "abc abc aab bba cab"])
    args = RLLMGRPOConfig(
        output_dir=str(out_dir / "trainer"),
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=6,
        num_generations=4,
        max_completion_length=2 * MAX_TURNS,
        max_steps=2,
        learning_rate=0.1,
        beta=0.0,
        report_to="none",
        save_strategy="no",
        shuffle_dataset=False,
        disable_tqdm=True,
        seed=0,
        adv_estimator="gigpo",
        adv_estimator_kwargs={"gamma": 0.9, "step_advantage_w": 1.0},
        ddp_backend="gloo",
    )
    trainer = RecordingTrainer(
        model=build_tiny_model(tokenizer, seed=0),
        reward_funcs=[score_reward],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": PROMPTS}),
        processing_class=tokenizer,
        rollout_func=rollout,
    )
    trainer.records = []
    trainer.train()
    rank = trainer.accelerator.process_index
    (out_dir / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "records": trainer.records}))
    trainer.accelerator.wait_for_everyone()


if __name__ == "__main__":
    leave(lambda: main(Path(sys.argv[1])))
