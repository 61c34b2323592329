"""The ``rllm:`` block checked when axolotl validates its config: trainers refused by name, rllm_trl's checks, the opt-out."""

from __future__ import annotations

import inspect
import os
import warnings

import pytest

pytest.importorskip("axolotl")
os.environ.setdefault("AXOLOTL_DO_NOT_TRACK", "1")

from axolotl.core.trainers.grpo import AxolotlGRPOTrainer, GRPOStrategy
from axolotl.core.trainers.grpo import async_trainer as axolotl_async
from axolotl.core.trainers.grpo import trainer as axolotl_trainers
from axolotl.integrations.base import PluginManager
from axolotl.utils.config import prepare_plugins, validate_config
from axolotl.utils.dict import DictDefault
from rllm_axolotl import RLLMAdvantagePlugin, versions
from rllm_axolotl.args import check_trainer_choice, resolve
from rllm_axolotl.plugin import rllm_trainer_class


def config(**overrides) -> DictDefault:
    cfg = {
        "base_model": "tiny/never-loaded",
        "plugins": ["rllm_axolotl.RLLMAdvantagePlugin"],
        "rl": "grpo",
        "trl": {"num_generations": 4, "max_completion_length": 4, "reward_funcs": ["m.r"]},
        "datasets": [{"path": "data.jsonl", "ds_type": "json", "split": "train"}],
        "micro_batch_size": 8,
        "gradient_accumulation_steps": 1,
        "learning_rate": 1e-3,
        "sequence_len": 64,
        "output_dir": "out",
        "rllm": {"adv_estimator": "rloo"},
    }
    for key, value in overrides.items():
        if value is None:
            cfg.pop(key, None)
        elif isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value
    return DictDefault(cfg)


def validated(cfg: DictDefault) -> DictDefault:
    """axolotl's own path: its plugins registered, then its config model (with the plugins' input models) validated."""
    prepare_plugins(cfg)
    return validate_config(cfg)


def test_the_block_passes_axolotls_validation_and_comes_back():
    cfg = validated(config(rllm={"adv_estimator": "rloo", "advantage_transforms": [{"name": "clip", "max": 2.0}]}))
    assert cfg.rllm["adv_estimator"] == "rloo" and cfg.rllm["advantage_transforms"] == [{"name": "clip", "max": 2.0}]


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"trl": {"async_prefetch": True}}, "AxolotlAsyncGRPOTrainer"),
        ({"trl": {"use_data_producer": True}}, "AxolotlAsyncGRPOTrainer"),
        ({"context_parallel_size": 2}, "AxolotlGRPOContextParallelTrainer"),
    ],
)
def test_a_trainer_whose_advantages_are_its_own_is_refused_by_name(overrides, named):
    with pytest.raises(ValueError, match=rf"rllm: axolotl picks {named} .* rllm-plugins does not support it: .*1e-4"):
        check_trainer_choice(config(**overrides))


def test_the_async_trainer_is_refused_when_axolotl_validates_the_config():
    with pytest.raises(Exception, match="AxolotlAsyncGRPOTrainer"):
        validated(config(trl={"async_prefetch": True}))


def test_another_rl_type_is_refused():
    with pytest.raises(ValueError, match="rl: grpo or gdpo"):
        check_trainer_choice(config(rl="dpo"))


def test_an_unknown_estimator_and_a_misspelt_field_are_refused_at_validation():
    with pytest.raises(Exception, match="adv_estimator"):
        validated(config(rllm={"adv_estimator": "rlooo"}))
    with pytest.raises(Exception, match="adv_estimatr"):
        validated(config(rllm={"adv_estimatr": "rloo"}))


def test_the_block_is_resolved_with_the_trl_settings_axolotl_gives_grpo():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        block = {"adv_estimator": "rloo", "reward_shapers": [{"name": "dapo_overlong", "max_length": 4, "buffer": 2}]}
        settings = resolve(config(trl={"scale_rewards": "batch"}), block)
    assert settings.estimator == "rloo" and [c.name for c in settings.shapers] == ["dapo_overlong"]
    assert any("scale_rewards='batch' is overridden by" in str(w.message) for w in caught)
    assert resolve(config(rl="gdpo"), {"adv_estimator": "grpo"}).aggregation == "normalize_then_sum"
    with pytest.raises(ValueError, match="beta"):  # a token-level transform needs the reference model: trl.beta > 0
        resolve(config(), {"advantage_transforms": [{"name": "kl_shaping", "coef": 0.1}]})


def test_without_the_block_the_plugin_leaves_axolotl_its_own_trainer():
    plugin = RLLMAdvantagePlugin()
    assert plugin.get_trainer_cls(config(rllm=None)) is None
    assert plugin.get_input_args() == "rllm_axolotl.args.RLLMAxolotlArgs"
    chosen = plugin.get_trainer_cls(config())
    assert chosen is rllm_trainer_class() is plugin.get_trainer_cls(config())  # one class, every call
    assert chosen.__mro__[2] is AxolotlGRPOTrainer


# ---------------------------------------------------------------- what the plugin relies on in axolotl (fails when axolotl changes it)


def test_the_installed_axolotl_has_what_the_plugin_relies_on():
    assert versions.AXOLOTL_VERSION in versions.SUPPORTED_AXOLOTL
    assert versions.problems() == []
    assert GRPOStrategy.get_trainer_class(context_parallel=False, async_grpo=False) is AxolotlGRPOTrainer


def test_axolotls_builder_still_hands_a_plugins_trainer_class_no_model():
    # the reason the trainer class adds the model and the reward functions: when axolotl passes them itself, the class takes those
    from axolotl.core.builders.rl import HFRLTrainerBuilder

    source = inspect.getsource(HFRLTrainerBuilder._get_trainer_cls)
    assert "plugin_manager.get_trainer_cls(self.cfg)" in source and "trainer_cls_args = []" in source


@pytest.mark.parametrize("refused", versions.REFUSED, ids=lambda r: r.trainer)
def test_each_refused_trainer_still_computes_its_advantages_itself(refused):
    owner = getattr(axolotl_async if refused.defined_in == "AsyncGRPOTrainer" else axolotl_trainers, refused.defined_in)
    assert getattr(axolotl_trainers, refused.trainer) is not None
    for method in refused.methods:
        assert method in owner.__dict__, f"{refused.defined_in}.{method}"
        assert "1e-4" in inspect.getsource(owner.__dict__[method]), f"{refused.defined_in}.{method}"
    assert issubclass(getattr(axolotl_trainers, refused.trainer), owner)


def test_a_changed_plugin_hook_is_named(monkeypatch):
    from axolotl.integrations.base import BasePlugin

    monkeypatch.setattr(BasePlugin, "get_trainer_cls", lambda self, cfg, extra: None)
    with pytest.raises(ValueError, match=r"BasePlugin.get_trainer_cls taking \('self', 'cfg'\)"):
        versions.check_axolotl()


def teardown_module() -> None:
    PluginManager.get_instance().plugins.pop("rllm_axolotl.RLLMAdvantagePlugin", None)
