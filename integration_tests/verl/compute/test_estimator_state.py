"""``rllm_rae`` (a stateful estimator) in verl: real ``compute_advantage`` across steps, and its state saved and restored
with the real ``_save_checkpoint`` / ``_load_checkpoint`` of verl's legacy and v1 trainers (guarded extensions).

The trainers' worker groups need GPUs, so they are stand-ins recording the calls (the only mock here); the
config, the ``StatefulDataLoader``, the checkpoint folders and verl's own methods are real.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
from omegaconf import OmegaConf
from rllm_verl.compute.state import ENV, STATE_FILE, verl_estimator_state
from rllm_verl.extension import extension_status
from rllm_verl.patches.checkpoints import CHECKPOINTS
from rllm_verl.versions import verl_features
from torchdata.stateful_dataloader import StatefulDataLoader
from verl import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, compute_advantage

V1 = verl_features().v1_trainer
if V1:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
else:  # verl < 0.9: test_versions.py checks that the v1 checkpoint extensions are absent there
    PPOTrainer = PPOTrainerSync = None
TRAINERS = [
    pytest.param(RayPPOTrainer, id="legacy"),
    pytest.param(PPOTrainerSync, id="v1 (PPOTrainerSync)", marks=pytest.mark.skipif(not V1, reason=f"verl {verl_features().version} has no v1 trainer")),
]
NEWEST = PPOTrainerSync if V1 else RayPPOTrainer  # the default trainer of the installed release

ALGORITHM = OmegaConf.create({"norm_adv_by_std_in_grpo": True, "rllm_estimator_kwargs": {"decay": 0.9}})


def batch(rewards, uids):
    n = len(rewards)
    mask = torch.ones(n, 4, dtype=torch.int64)
    mask[::2, 3] = 0  # uneven lengths
    token_level_rewards = torch.zeros(n, 4)
    token_level_rewards[:, 1] = torch.tensor(rewards, dtype=torch.float32)
    return DataProto.from_dict(tensors={"token_level_rewards": token_level_rewards, "response_mask": mask}, non_tensors={"uid": np.array(uids, dtype=object)})


def random_batches(seed, count):
    """Groups of 1-4 rows (uids contiguous, as verl's trainer repeats them), rewards multiples of 1/4."""
    rng = np.random.default_rng(seed)
    out = []
    for step in range(count):
        sizes = rng.integers(1, 5, rng.integers(1, 5))
        uids = [f"s{step}p{g}" for g, size in enumerate(sizes) for _ in range(size)]
        out.append(((rng.integers(-4, 5, len(uids)) / 4.0).tolist(), uids))
    return out


def reference(batches, decay):
    """prime-rl's loop over the rows in order (one baseline: verl's path has one role), exact fractions."""
    baseline, out = Fraction(0), []
    for rewards, _ in batches:
        step = []
        for r in map(Fraction, rewards):
            step.append(r - baseline)
            baseline = decay * baseline + (1 - decay) * r
        out.append([float(a) for a in step])
    return out


def advantages(rewards, uids):
    data = compute_advantage(batch(rewards, uids), adv_estimator="rllm_rae", config=ALGORITHM)
    adv = data.batch["advantages"]
    return adv[:, 0].tolist(), adv


@pytest.fixture(autouse=True)
def fresh_state():
    verl_estimator_state().clear()
    yield
    verl_estimator_state().clear()


def test_rllm_rae_equals_prime_rl_loop_across_steps_and_groups_of_one():
    batches = random_batches(0, 6)
    got = [advantages(rewards, uids)[0] for rewards, uids in batches]
    for step, expected in zip(got, reference(batches, Fraction(9, 10)), strict=True):
        np.testing.assert_allclose(step, expected, rtol=0, atol=1e-6)  # float32 output
    _, adv = advantages([1.0, 0.0], ["a", "b"])
    assert (adv[0, 3] == 0) and (adv[1, 3] != 0)  # masked tokens


def test_a_failing_call_leaves_the_state_unchanged():
    advantages([1.0], ["a"])
    before = verl_estimator_state().state_dict()
    bad = batch([1.0, 2.0], ["a", "b"])
    bad.batch["token_level_rewards"][1, 0] = float("nan")
    with pytest.raises(ValueError, match="must be finite"):
        compute_advantage(bad, adv_estimator="rllm_rae", config=ALGORITHM)
    assert verl_estimator_state().state_dict() == before


def test_key_by_task_is_refused_naming_why():
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": True, "rllm_estimator_kwargs": {"key_by": "task"}})
    with pytest.raises(ValueError, match="verl's estimator path has none"):
        compute_advantage(batch([1.0], ["a"]), adv_estimator="rllm_rae", config=config)
    assert not verl_estimator_state()


class WorkerGroupStandIn:
    """Records save/load calls (a real worker group needs GPUs)."""

    def __init__(self):
        self.calls = []

    def save_checkpoint(self, local_path, *args, **kwargs):
        os.makedirs(local_path, exist_ok=True)
        self.calls.append(("save", local_path))

    def load_checkpoint(self, local_path, **kwargs):
        self.calls.append(("load", local_path))


def trainer(cls, directory, resume_mode="auto"):
    obj = object.__new__(cls)
    obj.config = OmegaConf.create(
        {
            "trainer": {
                "default_local_dir": str(directory),
                "default_hdfs_dir": None,
                "resume_mode": resume_mode,
                "resume_from_path": None,
                "del_local_ckpt_after_load": False,
            },
            "actor_rollout_ref": {"actor": {"checkpoint": {"async_save": False}}},
        }
    )
    obj.actor_rollout_wg = WorkerGroupStandIn()
    obj.use_critic = False
    obj.train_dataloader = StatefulDataLoader(list(range(8)), batch_size=2)
    obj.global_steps = 0
    obj.trainer_mode = "sync"
    obj.checkpoint_callback = type("NoCallback", (), {"on_save": lambda self, **kw: None})()
    return obj


@pytest.mark.parametrize("cls", TRAINERS)
def test_a_checkpoint_and_a_resume_give_the_advantages_of_an_uninterrupted_run(cls, tmp_path):
    batches = random_batches(1, 5)
    straight = [advantages(rewards, uids)[0] for rewards, uids in batches]
    verl_estimator_state().clear()

    first = trainer(cls, tmp_path)
    for step, (rewards, uids) in enumerate(batches[:3], start=1):
        advantages(rewards, uids)
        first.global_steps = step
    first._save_checkpoint()  # verl's own, extended
    saved = tmp_path / "global_step_3" / STATE_FILE
    assert json.loads(saved.read_text()) == verl_estimator_state().state_dict()
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "3"

    verl_estimator_state().clear()  # a new TaskRunner process
    resumed = trainer(cls, tmp_path)
    resumed._load_checkpoint()
    assert resumed.global_steps == 3 and ("load", str(tmp_path / "global_step_3" / "actor")) in resumed.actor_rollout_wg.calls
    assert [advantages(rewards, uids)[0] for rewards, uids in batches[3:]] == straight[3:]


@pytest.mark.parametrize("cls", TRAINERS)
def test_resume_from_a_path_and_a_checkpoint_without_state(cls, tmp_path):
    advantages([1.0], ["a"])
    first = trainer(cls, tmp_path)
    first.global_steps = 2
    first._save_checkpoint()
    expected = verl_estimator_state().state_dict()
    verl_estimator_state().clear()
    resumed = trainer(cls, tmp_path / "elsewhere", resume_mode="resume_path")
    resumed.config.trainer.resume_from_path = str(tmp_path / "global_step_2")
    resumed._load_checkpoint()
    assert verl_estimator_state().state_dict() == expected
    (tmp_path / "global_step_2" / STATE_FILE).unlink()
    resumed._load_checkpoint()
    assert not verl_estimator_state()  # no saved state: start from nothing, not from a stale one


COMPOSITE_WITH_RAE = {"adv_estimator": "rllm_composite", "rllm_estimator_kwargs": {"terms": [["grpo", 0.5], ["rae", 0.5]]}}


@pytest.mark.parametrize("algorithm", [{"adv_estimator": "rllm_rae"}, COMPOSITE_WITH_RAE], ids=["rllm_rae", "composite with a rae term"])
@pytest.mark.parametrize("cls", TRAINERS)
def test_a_resume_without_the_state_file_warns_naming_the_path_when_a_stateful_estimator_is_configured(cls, algorithm, tmp_path):
    """Before: a composite with a rae term resumed silently (only a stateful spec was asked, not whether a term keeps state)."""
    advantages([1.0], ["a"])
    first = trainer(cls, tmp_path)
    first.global_steps = 2
    first._save_checkpoint()
    (tmp_path / "global_step_2" / STATE_FILE).unlink()
    resumed = trainer(cls, tmp_path)
    resumed.config.algorithm = OmegaConf.create(algorithm)
    path = tmp_path / "global_step_2" / STATE_FILE
    name = algorithm["adv_estimator"]
    with pytest.warns(RuntimeWarning, match=rf"has no {STATE_FILE} \(expected at {path}\); the running baselines of {name} start from 0"):
        resumed._load_checkpoint()
    assert not verl_estimator_state()


def test_a_resume_of_a_composite_without_a_stateful_term_does_not_warn(tmp_path):
    import warnings

    advantages([1.0], ["a"])
    first = trainer(RayPPOTrainer, tmp_path)
    first.global_steps = 2
    first._save_checkpoint()
    (tmp_path / "global_step_2" / STATE_FILE).unlink()
    resumed = trainer(RayPPOTrainer, tmp_path)
    resumed.config.algorithm = OmegaConf.create({"adv_estimator": "rllm_composite", "rllm_estimator_kwargs": {"terms": [["grpo", 0.5], ["rloo", 0.5]]}})
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        resumed._load_checkpoint()


def test_a_resume_under_another_decay_is_refused_at_the_first_step_unless_accepted(tmp_path, monkeypatch):
    advantages([1.0, 0.5], ["a", "a"])
    first = trainer(NEWEST, tmp_path)
    first.global_steps = 2
    first._save_checkpoint()
    saved = verl_estimator_state().state_dict()
    assert saved["options"] == {"rae": {"decay": 0.9, "key_by": "role"}}
    verl_estimator_state().clear()
    trainer(NEWEST, tmp_path)._load_checkpoint()
    other = OmegaConf.create({"norm_adv_by_std_in_grpo": True, "rllm_estimator_kwargs": {"decay": 0.5}})
    path = tmp_path / "global_step_2" / STATE_FILE
    with pytest.raises(ValueError, match=rf"option 'decay' is 0.5 now, but the state {path} was made with decay=0.9"):
        compute_advantage(batch([1.0], ["b"]), adv_estimator="rllm_rae", config=other)
    assert verl_estimator_state().state_dict() == saved
    monkeypatch.setenv("RLLM_PLUGINS_ACCEPT_CHANGED_STATE_OPTIONS", "decay")
    trainer(NEWEST, tmp_path)._load_checkpoint()
    data = compute_advantage(batch([1.0], ["b"]), adv_estimator="rllm_rae", config=other)
    b = saved["estimators"]["rae"]["all_groups"]["baseline"]
    assert data.batch["advantages"][0, 0].item() == pytest.approx(1.0 - b, abs=1e-6)
    assert verl_estimator_state().state_dict()["estimators"]["rae"]["all_groups"]["baseline"] == pytest.approx(0.5 * b + 0.5, abs=1e-12)


def test_a_state_file_of_another_layout_is_refused_at_load_naming_estimator_role_and_key(tmp_path):
    advantages([1.0], ["a"])
    first = trainer(RayPPOTrainer, tmp_path)
    first.global_steps = 1
    first._save_checkpoint()
    path = tmp_path / "global_step_1" / STATE_FILE
    saved = json.loads(path.read_text())
    saved["estimators"]["rae"]["all_groups"] = {"task_baselines": ["q"]}
    path.write_text(json.dumps(saved))
    with pytest.raises(ValueError, match=r"estimator 'rae', role 'all_groups', key 'task_baselines': expected a mapping of str to a finite float, got list"):
        trainer(RayPPOTrainer, tmp_path)._load_checkpoint()


def test_no_state_file_when_no_stateful_estimator_ran(tmp_path):
    first = trainer(RayPPOTrainer, tmp_path)
    first.global_steps = 1
    first._save_checkpoint()
    assert not (tmp_path / "global_step_1" / STATE_FILE).exists()


def test_verl_still_has_the_methods_the_extensions_were_written_for():
    """Fails loudly when verl renames or re-signs a checkpoint method: the extensions would be skipped (with a warning)."""
    for extension in CHECKPOINTS:
        if extension.requires and not getattr(verl_features(), extension.requires):
            continue  # test_versions.py: absent on this release
        assert extension_status()[extension.name] == "active", extension_status()
        cls_name, method = extension.attribute.split(".")
        cls = {"RayPPOTrainer": RayPPOTrainer, "PPOTrainer": PPOTrainer}[cls_name]
        current = getattr(cls, method)
        assert current.rllm_extension == extension.name
        assert list(inspect.signature(current.__wrapped__).parameters) == ["self"]


def test_the_opt_out_env_var_leaves_verl_untouched():
    code = (
        "import json\nfrom verl.trainer.ppo.ray_trainer import RayPPOTrainer\nfrom rllm_verl.extension import extension_status\n"
        "print(json.dumps([hasattr(RayPPOTrainer._save_checkpoint, 'rllm_extension'), extension_status()['estimator_state_save_legacy']]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, ENV: "0"}, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    wrapped, status = json.loads(done.stdout.splitlines()[-1])
    assert not wrapped and status == f"off ({ENV}=0)"


def test_the_docs_verl_command_checks_ok_and_verl_check_names_the_state_file():
    from pathlib import Path

    from rllm_verl.tools.check import verl_check

    doc = (Path(__file__).resolve().parents[3] / "docs" / "running_baselines.md").read_text()
    command = doc.split("## In verl", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    overrides = [word for word in command.split() if "=" in word]
    assert overrides == ["algorithm.adv_estimator=rllm_rae", "+algorithm.rllm_estimator_kwargs.decay=0.95"]
    report = verl_check(overrides)
    assert report.ok, str(report)
    assert f"global_step_<N>/{STATE_FILE}" in str(report) and report.estimator_state.startswith("active")
    bad = verl_check(["algorithm.adv_estimator=rllm_rae", "+algorithm.rllm_estimator_kwargs.key_by=task"])
    assert not bad.ok and "key_by='task'" in str(bad)


def composite_config(decay):
    terms = [["grpo", 0.5], ["rae", 0.5, {"decay": decay}]]
    return OmegaConf.create({"norm_adv_by_std_in_grpo": True, "rllm_estimator_kwargs": {"terms": terms}})


def test_a_composite_with_an_rae_term_records_its_options_and_refuses_a_resume_under_another_decay(tmp_path, monkeypatch):
    compute_advantage(batch([1.0, 0.5], ["a", "a"]), adv_estimator="rllm_composite", config=composite_config(0.5))
    first = trainer(NEWEST, tmp_path)
    first.global_steps = 2
    first._save_checkpoint()
    saved = verl_estimator_state().state_dict()
    assert saved["options"]["composite"]["terms"] == [["grpo", 0.5], ["rae", 0.5, {"decay": 0.5}]]
    verl_estimator_state().clear()
    trainer(NEWEST, tmp_path)._load_checkpoint()
    path = tmp_path / "global_step_2" / STATE_FILE
    with pytest.raises(ValueError, match=rf"estimator 'composite': option 'terms' is .* now, but the state {path} was made with terms="):
        compute_advantage(batch([1.0], ["b"]), adv_estimator="rllm_composite", config=composite_config(0.9))
    assert verl_estimator_state().state_dict() == saved
    monkeypatch.setenv("RLLM_PLUGINS_ACCEPT_CHANGED_STATE_OPTIONS", "terms")
    trainer(NEWEST, tmp_path)._load_checkpoint()
    compute_advantage(batch([1.0], ["b"]), adv_estimator="rllm_composite", config=composite_config(0.9))
    assert verl_estimator_state().state_dict()["options"]["composite"]["terms"][1] == ["rae", 0.5, {"decay": 0.9}]
