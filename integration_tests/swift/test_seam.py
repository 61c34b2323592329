"""The seam against the installed ms-swift: the functions it replaces are those it was written for (this fails first when
ms-swift changes them), it installs once, it can be refused and undone, and every module of ms-swift that binds them runs ours."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
import types
from pathlib import Path

import pytest

pytest.importorskip("swift")
torch = pytest.importorskip("torch")

import rllm_swift  # noqa: E402
from rllm_swift import seam, versions  # noqa: E402


@pytest.fixture(autouse=True)
def _clean():
    rllm_swift.uninstall()
    yield
    rllm_swift.uninstall()


def advantage_module():
    return importlib.import_module(versions.ADVANTAGE_MODULE)


def test_the_installed_ms_swift_is_in_the_supported_range_and_its_functions_are_those_the_seam_was_written_for():
    assert versions.supported(versions.installed_version()), versions.installed_version()
    assert versions.signature_problems(advantage_module()) == []


def test_the_supported_range_is_the_4_6_series():
    assert [versions.supported(v) for v in ("4.5.9", "4.6.0", "4.6.3", "4.6.0.post1", "4.7.0", "5.0")] == [False, True, True, True, False, False]


IMPORT = re.compile(r"from\s+([.\w]*advantage)\s+import\s+(\([^)]*\)|[^\n]*)")


def test_every_module_of_ms_swift_that_imports_an_advantage_function_is_a_known_consumer():
    root = Path(importlib.import_module("swift").__file__).parent
    found = set()
    for path in root.rglob("*.py"):
        for match in IMPORT.finditer(path.read_text(encoding="utf-8", errors="replace")):
            if set(re.findall(r"\w+", match.group(2))) & set(versions.FUNCTIONS):
                found.add(".".join(path.relative_to(root.parent).with_suffix("").parts))
    assert found == set(versions.CONSUMERS)


def test_ms_swift_grpo_trainer_computes_its_advantages_through_both_functions():
    trainer = importlib.import_module("swift.rlhf_trainers.grpo_trainer")
    source = inspect.getsource(trainer.GRPOTrainer._compute_advantages)
    assert "compute_advantages(" in source and "compute_advantages_dynamic(" in source
    assert "GRPOTrainer" in dir(trainer) and trainer.compute_advantages is advantage_module().compute_advantages


def test_install_replaces_both_functions_in_ms_swift_and_in_the_trainer_imported_before_and_once_only():
    trainer = importlib.import_module("swift.rlhf_trainers.grpo_trainer")
    module = advantage_module()
    originals = [getattr(module, name) for name in versions.FUNCTIONS]
    assert rllm_swift.install(rllm_swift.select("rloo"))
    replaced = [getattr(module, name) for name in versions.FUNCTIONS]
    assert rllm_swift.installed() and [getattr(f, seam.MARK) for f in replaced] == list(versions.FUNCTIONS)
    assert [getattr(trainer, name) for name in versions.FUNCTIONS] == replaced
    assert rllm_swift.install(rllm_swift.select("trl_grpo"))  # again: the selection changes, nothing is wrapped twice
    assert [getattr(module, name) for name in versions.FUNCTIONS] == replaced and rllm_swift.current().name == "trl_grpo"
    rllm_swift.uninstall()
    assert [getattr(module, name) for name in versions.FUNCTIONS] == originals == [getattr(trainer, name) for name in versions.FUNCTIONS]
    assert not rllm_swift.installed() and rllm_swift.current() is None


def test_a_module_imported_after_install_binds_the_replacement():
    module = advantage_module()
    rllm_swift.use("rloo")
    late = types.ModuleType("swift._rllm_late_consumer")
    exec("from swift.rl_core.advantage import compute_advantages, compute_advantages_dynamic", late.__dict__)
    assert late.compute_advantages is module.compute_advantages and getattr(late.compute_advantages_dynamic, seam.MARK) == "compute_advantages_dynamic"


def test_the_opt_out_leaves_ms_swift_as_it_is(monkeypatch):
    module = advantage_module()
    before = module.compute_advantages
    monkeypatch.setenv("RLLM_SWIFT_DISABLE", "1")
    assert rllm_swift.install(rllm_swift.select("rloo")) is False
    assert module.compute_advantages is before and not rllm_swift.installed()


def test_a_changed_signature_is_refused_naming_the_function_and_changing_nothing(monkeypatch):
    module = advantage_module()
    original = module.compute_advantages

    def changed(rewards_per_func, reward_weights, num_generations, advantage_estimator="grpo", scale_rewards="group", eps=1e-4):
        return original(rewards_per_func, reward_weights, num_generations, advantage_estimator, scale_rewards)

    monkeypatch.setattr(module, "compute_advantages", changed)
    with pytest.raises(versions.SwiftSeamError, match=r"compute_advantages\(.*eps=0\.0001\), the seam expects compute_advantages\(.*kl_values=None\)"):
        rllm_swift.install(rllm_swift.select("rloo"))
    assert module.compute_advantages is changed and not seam._originals


def test_a_missing_function_is_refused(monkeypatch):
    monkeypatch.delattr(advantage_module(), "compute_advantages_dynamic")
    with pytest.raises(versions.SwiftSeamError, match="compute_advantages_dynamic is missing"):
        rllm_swift.install(rllm_swift.select("rloo"))


def test_a_release_outside_the_range_with_matching_functions_is_used_with_a_warning(monkeypatch):
    monkeypatch.setattr(seam, "installed_version", lambda: "4.7.0")
    with pytest.warns(RuntimeWarning, match=r"ms-swift 4\.7\.0 is outside the tested range ms-swift>=4\.6,<4\.7"):
        assert rllm_swift.install(rllm_swift.select("rloo"))


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("gigpo", {}, "is step-level"),
        ("rae", {}, "keeps a state across steps"),
        ("no_such_estimator", {}, "no_such_estimator"),
        ("rloo", {"transforms": ["no_such_transform"]}, "no_such_transform"),
        ("rloo", {"shapers": [{"name": "dapo_overlong", "max_length": 8, "buffer": 2}]}, "does not provide"),
        ("rloo", {"estimator_kwargs": "[1, 2]"}, "must be a mapping"),
        ("grpo", {"estimator_kwargs": '{"epsilonn": 0.1}'}, "epsilonn"),
        ("trl_grpo", {"estimator_kwargs": {"scale_rewards": "batch"}}, "ms-swift's --scale_rewards"),
    ],
)
def test_what_the_seam_cannot_run_is_refused_when_selected(name, kwargs, message):
    with pytest.raises(Exception, match=message):
        rllm_swift.select(name, **kwargs)
    assert not rllm_swift.installed()


def test_the_rllm_prefix_is_accepted():
    assert rllm_swift.select("rllm_rloo").name == "rloo"


def test_the_package_needs_ms_swift(monkeypatch):
    monkeypatch.setitem(sys.modules, "swift", None)
    monkeypatch.delitem(sys.modules, "rllm_swift", raising=False)
    with pytest.raises(ModuleNotFoundError, match=r'pip install "ms-swift>=4\.6,<4\.7"'):
        importlib.import_module("rllm_swift")
