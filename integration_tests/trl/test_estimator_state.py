"""``rae`` (a stateful estimator) in real TRL training: the running baseline continues across steps, per role,
is saved in each checkpoint and restored by ``resume_from_checkpoint``, and evaluation does not change it.

The reference is prime-rl's loop re-stated: every scorable completion of the gathered batch, in order, is scored
against its role's baseline before its reward updates it (``b <- d * b + (1 - d) * r``, ``b`` starting at 0).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from rllm_trl.trainer import STATE_FILE

DECAY = 0.8


def reference_rae(records, roles, weights, baselines, decay=DECAY):
    """Advantages of each record (a generation) from ``baselines`` (role -> float, updated in place); 0 where unscorable."""
    out = []
    for record in records:
        per_func = record["rewards_per_func"].cpu().numpy().astype(np.float32)
        combined = np.nansum(per_func * np.asarray(weights, dtype=np.float32), axis=1).astype(np.float64)
        advantages = []
        for row, reward in enumerate(combined.tolist()):
            if np.isnan(per_func[row]).all():
                advantages.append(0.0)
                continue
            role = roles[row]
            baseline = baselines.get(role, 0.0)
            advantages.append(reward - baseline)
            baselines[role] = decay * baseline + (1 - decay) * reward
        out.append(np.array(advantages))
    return out


def rows_roles(trainer, prompt_dataset, step):
    """The role of each gathered row of training step ``step`` (prompts in dataset order, no shuffling, G rows each)."""
    g, per_step = trainer.args.num_generations, trainer.args.per_device_train_batch_size
    first = step * per_step // g
    return [prompt_dataset[(first + row // g) % len(prompt_dataset)]["role"] for row in range(per_step)]


def rae_trainer(make_trainer, **overrides):
    return make_trainer(adv_estimator="rae", adv_estimator_kwargs={"decay": DECAY}, role_column="role", **overrides)


def test_training_steps_continue_one_baseline_per_role(make_trainer, prompt_dataset, tmp_path):
    trainer = rae_trainer(make_trainer, max_steps=3)
    trainer.train()
    records = [r for r in trainer.records if r["mode"] == "train"]
    assert len(records) == 3
    baselines: dict[str, float] = {}
    for step, record in enumerate(records):
        (expected,) = reference_rae([record], rows_roles(trainer, prompt_dataset, step), [1.0, 0.5], baselines)
        np.testing.assert_allclose(record["advantages"].double().numpy(), expected, rtol=0, atol=1e-5)  # float32 advantages
    state = trainer.estimator_state.state_dict()["estimators"]["rae"]
    assert state.keys() == {"solver", "judge"}
    assert {role: s["baseline"] for role, s in state.items()} == pytest.approx(baselines, abs=1e-9)


def test_a_checkpoint_and_a_resume_give_the_advantages_of_an_uninterrupted_run(make_trainer, tmp_path):
    straight = rae_trainer(make_trainer, max_steps=4, save_strategy="steps", save_steps=2)
    straight.train()
    saved = json.loads((tmp_path / "checkpoint-2" / STATE_FILE).read_text())
    assert saved["estimators"]["rae"].keys() == {"solver", "judge"}
    assert straight.estimator_state.state_dict() != saved  # steps 3 and 4 moved it on

    resumed = rae_trainer(make_trainer, max_steps=4, save_strategy="no")
    assert not resumed.estimator_state
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    after = [r for r in straight.records if r["mode"] == "train"][2:]
    again = [r for r in resumed.records if r["mode"] == "train"]
    assert len(again) == 2
    for a, b in zip(after, again, strict=True):
        np.testing.assert_array_equal(b["rewards_per_func"].numpy(), a["rewards_per_func"].numpy())  # the same completions
        np.testing.assert_array_equal(b["advantages"].numpy(), a["advantages"].numpy())
    assert resumed.estimator_state.state_dict() == straight.estimator_state.state_dict()


def test_resuming_without_the_state_file_starts_the_baselines_from_nothing(make_trainer, tmp_path):
    first = rae_trainer(make_trainer, max_steps=2, save_strategy="steps", save_steps=2)
    first.train()
    (tmp_path / "checkpoint-2" / STATE_FILE).unlink()
    resumed = rae_trainer(make_trainer, max_steps=3, save_strategy="no")
    resumed.estimator_state.load_state_dict(first.estimator_state.state_dict())  # a stale state must not survive the resume
    path = tmp_path / "checkpoint-2" / STATE_FILE
    with pytest.warns(RuntimeWarning, match=rf"has no {STATE_FILE} \(expected at {path}\); the running baselines of \['rae'\] start from 0"):
        resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    (record,) = [r for r in resumed.records if r["mode"] == "train"]
    roles = [r["role"] for r in resumed.train_dataset.select([4, 4, 4, 4, 5, 5, 5, 5])]  # step 3: prompts 4 and 5
    (expected,) = reference_rae([record], roles, [1.0, 0.5], {})
    np.testing.assert_allclose(record["advantages"].double().numpy(), expected, rtol=0, atol=1e-5)


def test_a_resume_under_another_decay_is_refused_naming_both_values_unless_accepted(make_trainer, tmp_path, monkeypatch):
    first = rae_trainer(make_trainer, max_steps=2, save_strategy="steps", save_steps=2)
    first.train()
    saved = first.estimator_state.state_dict()
    assert saved["options"] == {"rae": {"decay": DECAY, "key_by": "role"}}
    changed = make_trainer(adv_estimator="rae", adv_estimator_kwargs={"decay": 0.5}, role_column="role", max_steps=3, save_strategy="no")
    path = tmp_path / "checkpoint-2" / STATE_FILE
    with pytest.raises(ValueError, match=rf"option 'decay' is 0.5 now, but the state {path} was made with decay={DECAY}"):
        changed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    monkeypatch.setenv("RLLM_PLUGINS_ACCEPT_CHANGED_STATE_OPTIONS", "decay")
    accepted = make_trainer(adv_estimator="rae", adv_estimator_kwargs={"decay": 0.5}, role_column="role", max_steps=3, save_strategy="no")
    accepted.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    (record,) = [r for r in accepted.records if r["mode"] == "train"]
    roles = [r["role"] for r in accepted.train_dataset.select([4, 4, 4, 4, 5, 5, 5, 5])]  # step 3: prompts 4 and 5
    baselines = {role: s["baseline"] for role, s in saved["estimators"]["rae"].items()}
    (expected,) = reference_rae([record], roles, [1.0, 0.5], baselines, decay=0.5)  # the saved baselines, the new decay
    np.testing.assert_allclose(record["advantages"].double().numpy(), expected, rtol=0, atol=1e-5)
    assert accepted.estimator_state.state_dict()["options"] == {"rae": {"decay": 0.5, "key_by": "role"}}


def test_a_state_file_of_another_layout_is_refused_at_resume_naming_estimator_role_and_key(make_trainer, tmp_path):
    first = rae_trainer(make_trainer, max_steps=2, save_strategy="steps", save_steps=2)
    first.train()
    path = tmp_path / "checkpoint-2" / STATE_FILE
    saved = json.loads(path.read_text())
    saved["estimators"]["rae"]["judge"] = {"baseline": None}
    path.write_text(json.dumps(saved))
    resumed = rae_trainer(make_trainer, max_steps=3, save_strategy="no")
    with pytest.raises(ValueError, match=r"estimator 'rae', role 'judge', key 'baseline': expected a finite float, got NoneType None"):
        resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))


def test_evaluation_uses_the_baseline_but_does_not_update_it(make_trainer, prompt_dataset, tmp_path):
    trainer = rae_trainer(make_trainer, max_steps=1, num_generations_eval=4, per_device_eval_batch_size=8)
    trainer.train()
    before = trainer.estimator_state.state_dict()
    trainer.evaluate(eval_dataset=prompt_dataset.select(range(2)))
    assert trainer.estimator_state.state_dict() == before
    (record,) = [r for r in trainer.records if r["mode"] == "eval"]
    baselines = {role: s["baseline"] for role, s in before["estimators"]["rae"].items()}
    roles = [prompt_dataset[row // 4]["role"] for row in range(8)]
    (expected,) = reference_rae([record], roles, [1.0, 0.5], baselines)
    np.testing.assert_allclose(record["advantages"].double().numpy(), expected, rtol=0, atol=1e-5)


def test_key_by_task_keys_the_baseline_by_prompt(make_trainer, tmp_path):
    trainer = make_trainer(adv_estimator="rae", adv_estimator_kwargs={"key_by": "task"}, max_steps=1)
    trainer.train()
    (state,) = trainer.estimator_state.state_dict()["estimators"]["rae"].values()
    assert sorted(state["task_baselines"]) == ["1+1=", "2+3="]


def test_the_docs_trl_snippet_builds_its_config(tmp_path, monkeypatch):
    from pathlib import Path

    from rllm_trl import RLLMGRPOConfig

    doc = (Path(__file__).resolve().parents[2] / "docs" / "running_baselines.md").read_text()
    code = doc.split("## In TRL", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    namespace = {"RLLMGRPOConfig": RLLMGRPOConfig}
    exec(compile(code.replace("RLLMGRPOConfig(", "RLLMGRPOConfig(use_cpu=True, per_device_train_batch_size=2, "), "docs", "exec"), namespace)
    args = namespace["args"]
    assert (args.adv_estimator, args.adv_estimator_kwargs, args.num_generations) == ("rae", {"decay": 0.95}, 2)


def test_normalize_then_sum_and_bad_options_are_refused_when_the_trainer_is_built(make_trainer):
    with pytest.raises(ValueError, match=r"stateful.*normalize_then_sum"):
        make_trainer(adv_estimator="rae", multi_objective_aggregation="normalize_then_sum")
    with pytest.raises(ValueError, match="0 <= decay < 1"):
        make_trainer(adv_estimator="rae", adv_estimator_kwargs={"decay": 1.5})
