"""One rank of the two-process test (run by ``torchrun --nproc_per_node=2``): 2 steps, records to ``<out>/rank<k>.json``.

6 completions per process, groups of 4: group 1 has rows 4-5 on rank 0 and rows 6-7 on rank 1.
With a third argument ``none-role-on-rank-1``, prompts carry a role column and rank 1's first
example has the role None at the first step. With ``nts-roles``, two reward functions (the second
None on every third gathered row) under ``multi_objective_aggregation="normalize_then_sum"``, and the
roles solver / judge alternating by prompt; each record then holds the role of each gathered group. With
``kl-shaping``, one step with ``advantage_transforms=[kl_shaping coef 0.5]`` (``beta`` 0.1, a reference model other than the policy,
``num_iterations`` 2 for TRL's old log-probs); each record then holds this rank's advantages before and after the
token-level transforms, the mask and both log-probs.
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

PROMPTS = ["1+1=", "2+3=", "the cat", "a b c", "hello", "7*6="]


def reward_length(completions: list[str], **_: Any) -> list[float]:
    return [len(c) / 8.0 for c in completions]


def letter_a_or_none(completions: list[str], **_: Any) -> list[float | None]:
    """None on every third row of this process's batch, else how often 'a' appears."""
    return [None if i % 3 == 1 else float(c.count("a")) for i, c in enumerate(completions)]


class RecordingTrainer(RLLMGRPOTrainer):
    records: list[dict[str, Any]]
    none_role_on_rank_1 = False

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> torch.Tensor:
        if self.none_role_on_rank_1 and self.accelerator.process_index == 1:
            inputs = [{**inputs[0], "role": None}, *inputs[1:]]
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self.records.append({"rewards_per_func": rewards.tolist(), "lengths": [len(ids) for ids in completion_ids_list]})
        return rewards

    def _token_transforms(self, output: dict[str, Any], token_part: Any, batch: Any) -> dict[str, float]:
        before = output["advantages"].tolist()
        metrics = super()._token_transforms(output, token_part, batch)
        self.records[-1]["tokens"] = {
            "before": before,
            "after": output["advantages"].tolist(),
            "mask": output["completion_mask"].tolist(),
            "logp": output["old_per_token_logps"].tolist(),
            "ref": output["ref_per_token_logps"].tolist(),
        }
        return metrics

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        self.records[-1]["advantages"] = output["advantages"].tolist()
        batch = self.last_reward_batch
        self.records[-1]["group_roles"] = [batch.roles[r] for r in batch.group_roles.tolist()]
        return output


def main(out_dir: Path, estimator: str, case: str = "") -> None:
    nts, kl = case == "nts-roles", case == "kl-shaping"
    tokenizer = build_tiny_tokenizer([*PROMPTS, "the quick brown fox jumps over the lazy dog 0123456789"])
    model = build_tiny_model(tokenizer, seed=0)
    if kl:  # GRPOTrainer builds the reference model from the policy's path when beta > 0: another model there, so the KL is not 0
        path = out_dir / f"reference{os.environ['RANK']}"
        build_tiny_model(tokenizer, seed=1).save_pretrained(path)
        model.config._name_or_path = str(path)
    transforms = {"advantage_transforms": [{"name": "kl_shaping", "coef": 0.5}], "num_iterations": 2} if kl else {}
    args = RLLMGRPOConfig(
        output_dir=str(out_dir / "trainer"),
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=6,
        num_generations=4,
        max_completion_length=8,
        max_steps=1 if kl else 2,
        learning_rate=0.1,
        beta=0.1 if kl else 0.0,
        report_to="none",
        save_strategy="no",
        shuffle_dataset=False,
        disable_tqdm=True,
        seed=0,
        adv_estimator=estimator,
        ddp_backend="gloo",
        role_column="role" if case and not kl else None,
        multi_objective_aggregation="normalize_then_sum" if nts else "sum_then_normalize",
        reward_weights=[1.0, -0.5] if nts else None,
        **transforms,
    )
    trainer = RecordingTrainer(
        model=model,
        reward_funcs=[reward_length, letter_a_or_none] if nts else [reward_length],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": PROMPTS, "role": ["solver", "judge"] * 3 if nts else ["solver"] * len(PROMPTS)}),
        processing_class=tokenizer,
    )
    trainer.records = []
    trainer.none_role_on_rank_1 = case == "none-role-on-rank-1"
    trainer.train()
    rank = trainer.accelerator.process_index
    result = {"rank": rank, "world_size": trainer.accelerator.num_processes, "records": trainer.records}
    (out_dir / f"rank{rank}.json").write_text(json.dumps(result))
    trainer.accelerator.wait_for_everyone()


if __name__ == "__main__":
    leave(lambda: main(Path(sys.argv[1]), sys.argv[2], *sys.argv[3:]))
