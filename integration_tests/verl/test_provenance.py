"""A verl run says which code computed its advantages: real ``compute_advantage`` calls (legacy trainer's function) print
the provenance line once per process and again when it changes; the state file of ``rllm_rae`` records the code that
made it, and a resume under another version of it warns naming both."""

from __future__ import annotations

import json
from importlib import metadata

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
from omegaconf import OmegaConf
from rllm_verl import context
from rllm_verl.compute.state import STATE_FILE, load_state, save_state, verl_estimator_state
from rllm_verl.context import PROVENANCE_PREFIX, quiet_provenance
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

from rllm_plugins.provenance import package_version

PLUGIN = "rllm-median-baseline"  # examples/rllm-median-baseline, installed in the environment
UIDS = ["a", "a", "b", "b"]


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    monkeypatch.setattr(context, "_announced", [])  # as a new TaskRunner: nothing printed yet
    verl_estimator_state().clear()
    yield
    verl_estimator_state().clear()


def advantages(name, algorithm, rewards=(1.0, 0.0, 0.5, 0.0)):
    token_level_rewards = torch.zeros(len(rewards), 3)
    token_level_rewards[:, 1] = torch.tensor(rewards)
    batch = DataProto.from_dict(
        tensors={"token_level_rewards": token_level_rewards, "response_mask": torch.ones(len(rewards), 3, dtype=torch.int64)},
        non_tensors={"uid": np.array(UIDS, dtype=object)},
    )
    data = compute_advantage(batch, adv_estimator=name, config=OmegaConf.create(algorithm))
    return data.batch["advantages"].numpy()


def printed(capsys):
    return [line.removeprefix(PROVENANCE_PREFIX) for line in capsys.readouterr().err.splitlines() if line.startswith(PROVENANCE_PREFIX)]


def test_the_first_step_prints_the_plugin_and_its_version_and_a_change_prints_again(capsys):
    version = metadata.version(PLUGIN)
    algorithm = {"norm_adv_by_std_in_grpo": True}
    for _ in range(3):
        advantages("rllm_median_baseline", algorithm)
    line = f'median_baseline [{PLUGIN} {version}]; options {{"norm_adv_by_std_in_grpo":true}}; transforms none; rllm-plugins {package_version()}'
    assert printed(capsys) == [line]  # three steps, one line
    clipped = {**algorithm, "rllm_advantage_transforms": [{"name": "clip", "max": 0.25}]}
    advantages("rllm_median_baseline", clipped)
    advantages("rllm_median_baseline", clipped)
    assert printed(capsys) == [line.replace("transforms none", 'transforms clip{"max":0.25} [built-in]')]
    with quiet_provenance():  # verl-check's and verl-rehearse's trial runs report it instead
        advantages("rllm_grpo", algorithm)
    assert printed(capsys) == []


def test_the_state_file_records_the_code_and_a_resume_under_another_version_warns_naming_both(tmp_path, recwarn):
    algorithm = {"norm_adv_by_std_in_grpo": True, "rllm_estimator_kwargs": {"decay": 0.5}}
    first = advantages("rllm_rae", algorithm)
    save_state(str(tmp_path))
    saved = json.loads((tmp_path / STATE_FILE).read_text())
    version = package_version()
    made_by = {"source": "built-in", "plugin": "builtin", "distribution": "rllm-plugins", "version": version, "rllm_plugins": version}
    assert saved["provenance"] == {"rae": made_by}

    load_state(str(tmp_path))  # the same code: no warning
    assert not np.array_equal(advantages("rllm_rae", algorithm), first)  # the baseline carried on
    assert not [w for w in recwarn if "was made by" in str(w.message)]

    saved["provenance"]["rae"]["version"] = "0.0.1"  # the file of an older release
    (tmp_path / STATE_FILE).write_text(json.dumps(saved))
    load_state(str(tmp_path))
    said = rf"the state {tmp_path / STATE_FILE} was made by the built-in of rllm-plugins 0\.0\.1, and the built-in of rllm-plugins {version} runs now"
    with pytest.warns(RuntimeWarning, match=said):
        advantages("rllm_rae", algorithm)
    recwarn.clear()
    advantages("rllm_rae", algorithm)  # said once per load
    assert not [w for w in recwarn if "was made by" in str(w.message)]
    save_state(str(tmp_path))
    assert json.loads((tmp_path / STATE_FILE).read_text())["provenance"]["rae"]["version"] == version  # the next file records the new code
