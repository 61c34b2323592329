"""TRL resolves its settings once: the config resolves and checks them, the trainer takes them (adding the trial run), and
no step looks an estimator up by name. ``rllm_trl.config`` loads no compute module; ``rllm_trl`` has at most 10 modules."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import rllm_trl
from rllm_trl import RLLMGRPOConfig, advantage_settings, check_trainer_setup

from rllm_plugins import registry

PACKAGE = Path(rllm_trl.__file__).parent
COMPUTE_MODULES = ("rllm_plugins.run", "rllm_plugins.trial", "rllm_trl.outcome", "rllm_trl.transforms")
BASE = {"output_dir": "unused", "use_cpu": True, "bf16": False}


def count_lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every call of ``rllm_plugins.registry.get_estimator``, through any module that imported it: the names asked for."""
    original = registry.get_estimator
    names: list[str] = []

    def counted(name: Any, *args: Any, **kwargs: Any) -> Any:
        names.append(str(name))
        return original(name, *args, **kwargs)

    for name, module in list(sys.modules.items()):
        if name.startswith(("rllm_plugins", "rllm_trl")) and vars(module).get("get_estimator") is original:
            monkeypatch.setattr(module, "get_estimator", counted)
    return names


@pytest.mark.parametrize(
    "fields",
    [
        {"adv_estimator": "rloo"},
        {"adv_estimator": "grpo", "adv_estimator_map": {"judge": "rloo"}, "role_column": "role"},
        {"adv_estimator": "step_reinforce"},
        {"adv_estimator": "trl_grpo", "scale_rewards": "batch", "advantage_transforms": [["clip", {"max": 1.0}]]},
    ],
    ids=["outcome", "per-role", "step-level", "trl-settings-and-transforms"],
)
def test_no_step_looks_an_estimator_up_by_name(monkeypatch, make_trainer, fields):
    looked_up = count_lookups(monkeypatch)
    trainer = make_trainer(max_steps=3, **fields)
    once = list(looked_up)
    distinct = {trainer.advantage_settings.estimator, *trainer.advantage_settings.estimator_map.values()}
    assert len(once) <= len(distinct), f"built with {once} for the names {sorted(distinct)}"
    trainer.train()
    assert trainer.state.global_step == 3
    assert looked_up == once, f"the steps looked up {looked_up[len(once) :]}"


def test_the_trainer_takes_the_settings_the_config_resolved(make_config, tmp_path, monkeypatch):
    config = make_config(tmp_path, RLLMGRPOConfig, adv_estimator="rloo", advantage_transforms=[["clip", {"max": 1.0}]])
    looked_up = count_lookups(monkeypatch)
    settings = check_trainer_setup(config)
    assert settings is advantage_settings(config)
    assert looked_up == []  # resolved when the config was built
    assert settings.transforms[0].name == "clip" and settings.selected["rloo"].spec.name == "rloo"


def test_a_field_set_after_the_config_was_built_is_resolved_again():
    config = RLLMGRPOConfig(**BASE, adv_estimator="rloo")
    first = advantage_settings(config)
    config.adv_estimator = "grpo"
    assert advantage_settings(config).estimator == "grpo" and first.estimator == "rloo"
    config.adv_estimator = "no_such_estimator"
    with pytest.raises(ValueError, match=r"adv_estimator: .*no_such_estimator"):
        advantage_settings(config)


def test_the_resolved_settings_stay_out_of_a_pickled_config():
    import pickle

    config = RLLMGRPOConfig(**BASE, adv_estimator="rloo")
    assert "_rllm_settings" in vars(config)
    copy = pickle.loads(pickle.dumps(config))
    assert "_rllm_settings" not in vars(copy) and advantage_settings(copy).estimator == "rloo"


def test_importing_the_config_loads_no_compute_module():
    code = textwrap.dedent(
        """
        import sys
        import rllm_trl.config
        from rllm_trl import RLLMGRPOConfig
        RLLMGRPOConfig(output_dir="unused", use_cpu=True, bf16=False, adv_estimator="rloo", advantage_transforms=[["clip", {"max": 1.0}]])
        print(" ".join(sorted(name for name in sys.modules if name.startswith(("rllm_trl", "rllm_plugins.trial", "rllm_plugins.run")))))
        """
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True).stdout.split()
    # rllm_plugins.run is loaded by the core package itself (rllm_plugins/__init__ exports the collector); config.py's own
    # imports are checked below
    assert [name for name in COMPUTE_MODULES if name in loaded and name != "rllm_plugins.run"] == []
    assert set(loaded) - {"rllm_plugins.run"} == {"rllm_trl", "rllm_trl.config", "rllm_trl.versions"}


def test_config_py_imports_no_compute_module():
    tree = ast.parse((PACKAGE / "config.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert sorted(imported & set(COMPUTE_MODULES)) == []
    assert not any(name.startswith("rllm_trl.") and name not in ("rllm_trl.versions",) for name in imported), sorted(imported)


def test_at_most_ten_flat_modules():
    modules = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(modules) <= 10, modules
    assert not [path for path in PACKAGE.iterdir() if path.is_dir() and path.name != "__pycache__"]


def test_the_public_names_and_the_old_paths_still_import():
    from rllm_trl import RLLMAdvantageMixin, RLLMGRPOTrainer, compute_advantages_via_groups

    assert issubclass(RLLMGRPOTrainer, RLLMAdvantageMixin) and callable(compute_advantages_via_groups)
    assert sorted(rllm_trl.__all__) == sorted(rllm_trl.EXPORTS)
    for name in rllm_trl.__all__:
        assert getattr(rllm_trl, name) is not None
