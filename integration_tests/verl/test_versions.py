"""The version seam (:mod:`rllm_verl.versions`) against the installed verl: every flag it derives from the version number
is checked against what that verl really ships, and every extension is active exactly where its feature exists.

Run in each verl cell of ``make compat`` (0.7.1, 0.8.0, 0.9.1): a release that moves what a guard relies on fails here,
naming the guard, rather than in a user's training run.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
import verl
from rllm_verl.extension import ADVANTAGE_PARAMETERS, NO_DEFAULT, extension_status, install
from rllm_verl.patches.checkpoints import CHECKPOINTS
from rllm_verl.patches.legacy import REWARD_KEYS
from rllm_verl.patches.sessions import SESSIONS
from rllm_verl.patches.sync_trainer import SYNC_TRAINER
from rllm_verl.patches.v1 import V1_BATCH
from rllm_verl.tools.check import entry_point_policy_error
from rllm_verl.versions import FEATURE_TEXT, MODULES_LINE, SYNC_TRAINER_REFUSAL, features_of, parse_version, resolve_config_path, verl_features
from verl import DataProto

FEATURES = verl_features()
EXTENSIONS = (SESSIONS, REWARD_KEYS, V1_BATCH, SYNC_TRAINER, *CHECKPOINTS)


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def test_the_version_read_from_metadata_is_the_one_verl_reports():
    from packaging.version import Version

    assert Version(FEATURES.version) == Version(verl.__version__)  # a build from source: metadata 0.10.0.dev0, verl 0.10.0.dev
    assert FEATURES.unsupported is None, FEATURES.unsupported


def test_entry_point_loading_is_in_verl_init_exactly_when_the_seam_says_so():
    source = Path(verl.__file__).read_text(encoding="utf-8")
    assert ('group="verl.plugins"' in source) is FEATURES.entry_points, (
        f"verl {FEATURES.version}: import verl {'no longer' if FEATURES.entry_points else 'now'} loads verl.plugins entry points; "
        "update FIRST_WITH_ENTRY_POINTS in rllm_verl.versions"
    )
    assert 'os.getenv("VERL_USE_EXTERNAL_MODULES"' in source, f"verl {FEATURES.version}: import verl no longer reads VERL_USE_EXTERNAL_MODULES"


@pytest.mark.parametrize("flag, module", [("v1_trainer", "verl.trainer.ppo.v1.trainer_base"), ("sync_trainer", "verl.trainer.main_ppo_sync")])
def test_each_trainer_module_exists_exactly_when_the_seam_says_so(flag, module):
    state = "is missing" if getattr(FEATURES, flag) else "exists"
    assert _exists(module) is getattr(FEATURES, flag), f"verl {FEATURES.version}: {module} {state}; rllm_verl.versions' {flag} says otherwise"


def test_verls_agent_loop_config_resolver_is_where_the_seam_says():
    module = importlib.import_module(FEATURES.config_path_resolver)
    assert callable(getattr(module, "resolve_config_path", None)), f"verl {FEATURES.version}: {module.__name__} has no resolve_config_path"
    assert resolve_config_path(__file__) == __file__  # an absolute path is returned as is, as verl's workers do
    with pytest.raises(FileNotFoundError):
        resolve_config_path("no/such/agent_loops.yaml")


def test_verls_agent_loop_worker_builds_each_loop_with_the_arguments_the_seam_names():
    """verl-rehearse builds the agent loop with these keyword arguments, as the worker of this release does."""
    import re

    import verl.experimental.agent_loop.agent_loop as agent_loop

    source = Path(agent_loop.__file__).read_text(encoding="utf-8")
    calls = re.findall(r"agent_loop = hydra\.utils\.instantiate\((.*?)\n\s*\)", source, re.S)
    assert len(calls) == 1, f"verl {FEATURES.version}: AgentLoopWorker builds agent loops elsewhere; update agent_loop_arguments in rllm_verl.versions"
    passed = tuple(name for name in re.findall(r"(\w+)=", calls[0]) if name != "config")
    assert passed == FEATURES.agent_loop_arguments, f"verl {FEATURES.version} passes {passed}; rllm_verl.versions' agent_loop_arguments says otherwise"


@pytest.mark.parametrize(
    "version, resolver, tools, hf_model_type",
    [
        ("0.7.1", "verl.experimental.agent_loop.utils", False, False),
        ("0.8.0", "verl.experimental.agent_loop.utils", True, False),
        ("0.9.0", "verl.experimental.agent_loop.utils", True, False),  # resolve_config_path moved to import_utils in 0.9.1
        ("0.9.1", "verl.utils.import_utils", True, True),
    ],
)
def test_where_each_release_resolves_config_paths_and_what_it_gives_agent_loops(version, resolver, tools, hf_model_type):
    f = features_of(version)
    assert (f.config_path_resolver, "tools" in f.agent_loop_arguments, "hf_model_type" in f.agent_loop_arguments) == (resolver, tools, hf_model_type)


def test_the_registry_and_the_legacy_advantage_step_are_what_every_extension_relies_on():
    from verl.trainer.ppo import core_algos, ray_trainer

    assert callable(core_algos.register_adv_est) and callable(core_algos.get_adv_estimator_fn)
    assert isinstance(core_algos.ADV_ESTIMATOR_REGISTRY, dict)
    parameters = inspect.signature(inspect.unwrap(ray_trainer.compute_advantage)).parameters
    assert tuple((p.name, p.default) for p in parameters.values()) == (("data", NO_DEFAULT), *ADVANTAGE_PARAMETERS)


@pytest.mark.parametrize("extension", EXTENSIONS, ids=lambda e: e.name)
def test_each_extension_is_active_where_its_feature_exists_and_absent_elsewhere(extension):
    status = install(extension)
    if extension.requires is not None and not getattr(FEATURES, extension.requires):
        assert status == f"absent: verl {FEATURES.version} has no {FEATURE_TEXT[extension.requires]}"
        assert not _exists(extension.module)
        return
    importlib.import_module(extension.module)  # applies a pending extension
    assert extension_status()[extension.name] == "active", f"verl {FEATURES.version}: {extension.target}: {extension_status()[extension.name]}"


def test_without_the_variable_an_old_verl_is_refused_naming_the_one_line_to_add():
    error = entry_point_policy_error({}, [], entry_points=False)
    assert error is not None and "Fix: export VERL_USE_EXTERNAL_MODULES=rllm_verl.plugin in the shell that starts the driver" in error
    other = entry_point_policy_error({"VERL_USE_EXTERNAL_MODULES": "my_pkg.tools"}, [], entry_points=False)
    assert other is not None and "export VERL_USE_EXTERNAL_MODULES=my_pkg.tools,rllm_verl.plugin " in other
    assert entry_point_policy_error({"VERL_USE_EXTERNAL_MODULES": "my_pkg.tools,rllm_verl.plugin"}, [], entry_points=False) is None
    assert MODULES_LINE == "export VERL_USE_EXTERNAL_MODULES=rllm_verl.plugin"


def test_a_fresh_interpreter_registers_the_names_by_the_mechanism_of_this_release():
    """``import verl`` alone, without the variable: the names are there exactly on a release with entry points; with it, always."""
    code = "import verl\nfrom verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY as R\nprint('rllm_grpo' in R, 'rllm_gigpo' in R)"
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_MODULES"}
    bare = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert bare.returncode == 0, bare.stderr
    assert bare.stdout.split()[-2:] == [str(FEATURES.entry_points)] * 2
    env["VERL_USE_EXTERNAL_MODULES"] = "rllm_verl.plugin"
    with_line = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert with_line.returncode == 0, with_line.stderr
    assert with_line.stdout.split()[-2:] == ["True", "True"]


def test_verl_check_without_the_variable_passes_on_a_release_with_entry_points_and_refuses_naming_the_line_elsewhere():
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_MODULES"}
    command = [str(Path(sys.executable).parent / "rllm-plugins"), "verl-check", "algorithm.adv_estimator=rllm_grpo"]  # the user's command
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)
    if FEATURES.entry_points:
        assert done.returncode == 0, done.stdout + done.stderr[-2000:]
        assert f"verl {FEATURES.version} loads the verl.plugins entry point 'rllm_plugins' (rllm_verl.plugin) in import verl: in place" in done.stdout
    else:
        assert done.returncode == 1, done.stdout + done.stderr[-2000:]
        assert f"error: verl {FEATURES.version} has no verl.plugins entry points (they came with verl 0.9.0)" in done.stdout
        assert "Fix: export VERL_USE_EXTERNAL_MODULES=rllm_verl.plugin in the shell that starts the driver" in done.stdout
        assert "NOT in place" in done.stdout


@pytest.mark.skipif(not FEATURES.sync_trainer, reason=f"verl {FEATURES.version} has no verl.trainer.main_ppo_sync")
def test_verl_08_sync_trainer_refuses_rllm_names_before_computing_and_leaves_verl_names_alone():
    install(SYNC_TRAINER)
    sync = importlib.import_module("verl.trainer.main_ppo_sync")
    mask = torch.ones(4, 3, dtype=torch.int64)
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 1.0, 1.0])
    uids = np.array(["a", "a", "b", "b"], dtype=object)
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors={"uid": uids})
    keys = ["a_0_0", "a_1_0", "b_0_0", "b_1_0"]
    want = SYNC_TRAINER_REFUSAL.format(name="rllm_grpo", version=FEATURES.version, module="verl.trainer.main_ppo_sync")
    with pytest.raises(ValueError) as caught:
        sync.compute_advantage_for_multi_trajectories(data, keys, "rllm_grpo")
    assert str(caught.value) == want
    assert "advantages" not in data.batch.keys()  # noqa: SIM118 - a TensorDict
    out = sync.compute_advantage_for_multi_trajectories(data, keys, "grpo", norm_adv_by_std_in_grpo=False)
    assert out.batch["advantages"][:, -1].tolist() == pytest.approx([0.5, -0.5, 0.0, 0.0])


@pytest.mark.parametrize(
    "version, entry_points, v1, sync, unsupported, untested",
    [
        ("0.6.9", False, False, False, True, False),
        ("0.7.1", False, False, False, False, False),
        ("0.8.0", False, False, True, False, False),
        ("0.8.3.dev1", False, False, True, False, False),
        ("0.9.0", True, True, False, False, False),
        ("0.9.1", True, True, False, False, False),
        ("0.10.0rc1", True, True, False, False, True),
    ],
)
def test_features_of_each_release(version, entry_points, v1, sync, unsupported, untested):
    f = features_of(version)
    assert (f.entry_points, f.v1_trainer, f.sync_trainer, f.unsupported is not None, f.untested is not None) == (entry_points, v1, sync, unsupported, untested)
    assert f.registration == ("entry point" if entry_points else "VERL_USE_EXTERNAL_MODULES")


@pytest.mark.parametrize("text", ["", "v0.9", "nightly", "0"])
def test_an_unreadable_version_is_refused_naming_it(text):
    with pytest.raises(ValueError, match=f"cannot read verl's version {text!r}: expected MAJOR.MINOR"):
        parse_version(text)


def test_docs_verl_quotes_the_line_to_add_the_refusal_and_the_absent_status_as_the_program_says_them():
    page = (Path(__file__).resolve().parents[2] / "docs" / "verl.md").read_text(encoding="utf-8")
    assert f"```bash\n{MODULES_LINE}\n```" in page
    refusal = SYNC_TRAINER_REFUSAL.format(name="rllm_grpo", version="0.8.0", module="verl.trainer.main_ppo_sync")
    assert refusal.split(": ", 1)[1].split(" (its")[0] in " ".join(page.split())
    assert f"absent: verl 0.8.0 has no {FEATURE_TEXT['v1_trainer'].split(' (')[0]} ..." in page
    assert "registration in every process that imports verl: ... in place" in page
