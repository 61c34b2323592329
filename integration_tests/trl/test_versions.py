"""What rllm_trl relies on in the installed TRL and transformers (``rllm_trl.versions``), checked against the real packages.

Each test fails loudly, naming what changed, when a TRL or transformers release changes a method the mixin
overrides, a config default it reads, an attribute or output key of the trainer, or what a multi-turn path
needs. Run in every cell of the version matrix (TRL 1.14.2, 1.15.0, 1.16.0; transformers 4.x and 5.x).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import warnings
from importlib.metadata import requires
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
import trl
from datasets import Dataset
from packaging.requirements import Requirement
from packaging.version import Version
from rllm_trl import RLLMAdvantageMixin, RLLMGRPOConfig, RLLMGRPOTrainer, versions
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from trl.chat_template_utils import qwen2_5_chat_template

from rllm_plugins.tiny import build_tiny_model, build_tiny_tokenizer

from .conftest import PROMPTS, Calculator, multiply, reward_length

INSTALLED = f"TRL {trl.__version__} (transformers {transformers.__version__})"


def test_the_installed_trl_is_in_the_extra_s_range_and_the_range_is_the_adapter_s():
    pins = [r for r in map(Requirement, requires("rllm-plugins") or []) if r.name == "trl"]
    assert [str(p.specifier) for p in pins] == [str(versions.SUPPORTED_TRL)], "the [trl] extra and rllm_trl.versions.SUPPORTED_TRL differ"
    assert trl.__version__ in versions.SUPPORTED_TRL, f"{INSTALLED} is outside {versions.SUPPORTED_TRL}"
    assert (Version(trl.__version__), Version(transformers.__version__)) == (versions.TRL_VERSION, versions.TRANSFORMERS_VERSION)


def test_trl_s_own_transformers_floor_is_what_the_docs_say():
    """TRL 1.14-1.16 declare transformers>=4.56.2: the oldest transformers a user of the [trl] extra can have."""
    pins = [r for r in map(Requirement, requires("trl") or []) if r.name == "transformers" and r.marker is None]
    assert [str(p.specifier) for p in pins] == [">=4.56.2"]


@pytest.mark.parametrize("hook", versions.HOOKS, ids=lambda h: h.name)
def test_every_hook_the_mixin_relies_on_has_its_parameters(hook):
    method = getattr(GRPOTrainer, hook.name, None)
    assert method is not None, f"{INSTALLED}: GRPOTrainer.{hook.name} is gone ({hook.feature} rely on it)"
    assert tuple(inspect.signature(method).parameters) == hook.parameters, f"{INSTALLED}: GRPOTrainer.{hook.name} changed"
    assert versions.hook_problem(hook) is None


@pytest.mark.parametrize("hook", versions.HOOKS, ids=lambda h: h.name)
def test_a_changed_hook_is_refused_naming_the_feature_the_method_and_the_versions(hook):
    changed = type("Changed", (GRPOTrainer,), {hook.name: lambda self, *args, extra=None: None})
    message = rf"where: {re.escape(hook.feature)} need Changed\.{hook.name} taking .* and with {re.escape(INSTALLED)} it takes \('self', 'args', 'extra'\)"
    with pytest.raises(ValueError, match=message):
        versions.check_hooks(changed, where="where")


def test_the_state_hooks_are_required_only_with_a_stateful_estimator(monkeypatch, tmp_path):
    """At config time: a TRL whose checkpoint methods differ still runs stateless estimators, and refuses ``rae`` by name."""
    monkeypatch.setattr(GRPOTrainer, "_load_optimizer_and_scheduler", lambda self, checkpoint, strict: None)
    config = RLLMGRPOConfig(output_dir=str(tmp_path), use_cpu=True, num_generations=4, adv_estimator="grpo")
    assert config.adv_estimator == "grpo"
    with pytest.raises(ValueError, match=r"RLLMGRPOConfig: estimator state checkpoints .* need GRPOTrainer\._load_optimizer_and_scheduler taking"):
        RLLMGRPOConfig(output_dir=str(tmp_path), use_cpu=True, num_generations=4, adv_estimator="rae")


def test_a_trl_without_the_reward_hook_is_refused_when_the_config_is_built(monkeypatch, tmp_path):
    monkeypatch.delattr(GRPOTrainer, "_calculate_rewards")
    message = rf"RLLMGRPOConfig: rLLM advantages need GRPOTrainer\._calculate_rewards taking .* and with {re.escape(INSTALLED)} it has no such method"
    with pytest.raises(ValueError, match=message):
        RLLMGRPOConfig(output_dir=str(tmp_path), use_cpu=True, num_generations=4)


def test_a_trainer_subclass_with_a_changed_hook_is_refused_before_trl_builds(tokenizer, tmp_path):
    class Changed(GRPOTrainer):
        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list, extra=None):
            raise AssertionError("never called")

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise AssertionError("TRL's __init__ must not run")

    class Trainer(RLLMAdvantageMixin, Changed):
        pass

    args = RLLMGRPOConfig(output_dir=str(tmp_path), use_cpu=True, num_generations=4)
    with pytest.raises(ValueError, match=r"^Trainer: rLLM advantages need Changed\._calculate_rewards taking"):
        Trainer(model=build_tiny_model(tokenizer), reward_funcs=[reward_length], args=args, processing_class=tokenizer)


def test_an_untested_trl_whose_hooks_match_runs_with_one_warning(monkeypatch):
    versions._warn_untested.cache_clear()
    try:
        with monkeypatch.context() as patched:
            patched.setattr(versions, "TRL_VERSION", Version("1.17.0"))
            with pytest.warns(UserWarning, match=r"rllm_trl is tested with trl<1\.17,>=1\.14; TRL 1\.17\.0 .* is installed") as caught:
                versions.check_hooks()
                versions.check_hooks()
            assert len([w for w in caught if "is tested with" in str(w.message)]) == 1
    finally:
        versions._warn_untested.cache_clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        versions.check_hooks()  # the installed, supported TRL: no warning


def test_the_config_fields_the_adapter_reads_have_trl_s_defaults(tmp_path):
    fields = {f.name: f for f in dataclasses.fields(GRPOConfig)}
    config = GRPOConfig(output_dir=str(tmp_path), use_cpu=True)
    for name, default in versions.CONFIG_FIELDS.items():
        assert name in fields, f"{INSTALLED}: GRPOConfig.{name} is gone"
        assert getattr(config, name) == default, f"{INSTALLED}: GRPOConfig.{name} defaults to {getattr(config, name)!r}, rllm_trl reads {default!r}"
    versions.check_config_fields()
    # RLLMGRPOConfig parses its dict fields from JSON strings through TRL's list of dict fields
    assert {"gradient_checkpointing_kwargs", "model_init_kwargs"} <= set(GRPOConfig._VALID_DICT_FIELDS)
    parsed = RLLMGRPOConfig(output_dir=str(tmp_path), use_cpu=True, num_generations=4, adv_estimator_kwargs='{"epsilon": 0.001}')
    assert parsed.adv_estimator_kwargs == {"epsilon": 0.001}


def test_a_built_trainer_has_what_the_mixin_reads_and_its_step_returns_the_keys_it_reads(make_trainer):
    trainer = make_trainer(max_steps=1)
    for name in versions.TRAINER_ATTRIBUTES:
        assert hasattr(trainer, name), f"{INSTALLED}: a built GRPOTrainer has no {name}"
    trainer.train()
    (record,) = trainer.records
    assert record["advantages"].shape == (8,)
    trainer.model.train()
    output = GRPOTrainer._generate_and_score_completions(trainer, [{"prompt": p} for p in PROMPTS[:2] for _ in range(4)])
    assert set(versions.OUTPUT_KEYS) <= set(output), f"{INSTALLED}: the step returns {sorted(output)}"
    assert output["advantages"].shape == (8,) and output["completion_mask"].shape == output["completion_ids"].shape


def test_a_trainer_missing_an_attribute_or_an_output_key_is_refused_by_name(tokenizer, prompt_dataset, tmp_path):
    class NoNames(GRPOTrainer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            del self.reward_func_names

    class Trainer(RLLMAdvantageMixin, NoNames):
        pass

    args = RLLMGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, num_generations=4, per_device_train_batch_size=4, report_to="none")
    with pytest.raises(
        ValueError, match=rf"^Trainer: rllm_trl reads \['reward_func_names'\] of a built GRPOTrainer, which {re.escape(INSTALLED)} does not set"
    ):
        Trainer(model=build_tiny_model(tokenizer), reward_funcs=[reward_length], args=args, train_dataset=prompt_dataset, processing_class=tokenizer)
    with pytest.raises(RuntimeError, match=r"returned no \['completion_mask'\]"):
        versions.check_output({"prompt_ids": 0, "prompt_mask": 0, "completion_ids": 0, "advantages": 0})


def _trl_s_transformers_floors() -> dict[str, Version]:
    """What GRPOTrainer.__init__'s own source says each tool path needs: "Using <path> with GRPOTrainer requires transformers version X or higher"."""
    source = inspect.getsource(GRPOTrainer.__init__)
    found = re.findall(r"Using `?(\w+)`? with GRPOTrainer requires transformers version ([\d.]+) or higher", source)
    return {name: Version(version) for name, version in found}


def test_the_transformers_each_tool_path_needs_is_what_trl_checks():
    floors = _trl_s_transformers_floors()
    assert floors == {"tools": Version("5.0.0"), "environment_factory": Version("5.2.0")}, f"{INSTALLED}: TRL's checks changed: {floors}"
    assert {p.argument: p.min_transformers for p in versions.TOOL_PATHS} == {**floors, "rollout_func": None}
    parameters = inspect.signature(GRPOTrainer.__init__).parameters
    assert all(p.argument in parameters for p in versions.TOOL_PATHS)


@pytest.fixture(scope="module")
def tool_tokenizer() -> Any:
    """The tiny tokenizer with TRL's Qwen2.5 chat template (it renders tool calls)."""
    tokenizer = build_tiny_tokenizer(["What is 3 times 4?", '<tool_call>\n{"name": "multiply"}\n</tool_call>'], vocab_size=400)
    tokenizer.chat_template = qwen2_5_chat_template
    return tokenizer


def _rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
    return {"prompt_ids": [[1, 2]] * len(prompts), "completion_ids": [[3, 4]] * len(prompts), "logprobs": [[-1.0, -1.0]] * len(prompts)}


PATH_ARGUMENTS = {"tools": [multiply], "environment_factory": Calculator, "rollout_func": _rollout}


@pytest.mark.parametrize("path", versions.TOOL_PATHS, ids=lambda p: p.argument)
def test_each_tool_path_builds_where_the_versions_have_it_and_is_refused_by_name_where_not(path, tool_tokenizer, tmp_path):
    """TRL's own trainer builds with the path exactly where rllm_trl says the installed versions have it."""

    def build(trainer_class: type, config_class: type) -> Any:
        args = config_class(output_dir=str(tmp_path), use_cpu=True, bf16=False, num_generations=4, per_device_train_batch_size=4, report_to="none")
        dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": "What is 3 times 4?"}]] * 4})
        return trainer_class(
            model=build_tiny_model(tool_tokenizer),
            reward_funcs=[reward_length],
            args=args,
            train_dataset=dataset,
            processing_class=tool_tokenizer,
            **{path.argument: PATH_ARGUMENTS[path.argument]},
        )

    problem = versions.tool_path_problem(path)
    if problem is None:
        stock = build(GRPOTrainer, GRPOConfig)
        assert getattr(stock, path.attribute) is not None, f"{INSTALLED}: GRPOTrainer({path.argument}=...) no longer sets .{path.attribute}"
        ours = build(RLLMGRPOTrainer, RLLMGRPOConfig)
        assert getattr(ours, path.attribute) is not None
        return
    with pytest.raises(ImportError, match=r"requires (transformers version|the jmespath)"):
        build(GRPOTrainer, GRPOConfig)  # TRL refuses too: the threshold is TRL's
    with pytest.raises(ValueError, match=rf"^RLLMGRPOTrainer: {path.argument}= \({re.escape(path.what)}\) .*{re.escape(INSTALLED)}"):
        build(RLLMGRPOTrainer, RLLMGRPOConfig)


def test_the_multi_turn_path_is_read_from_the_attributes_trl_sets(tool_tokenizer, tmp_path):
    from rllm_trl.turns import multi_turn_path

    args = RLLMGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, num_generations=4, per_device_train_batch_size=4, report_to="none")
    trainer = RLLMGRPOTrainer(
        model=build_tiny_model(tool_tokenizer),
        reward_funcs=[reward_length],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["What is 3 times 4?"] * 4}),
        processing_class=tool_tokenizer,
        rollout_func=_rollout,
    )
    path = multi_turn_path(trainer)
    assert (path.tools, path.environment_factory, path.rollout_func) == (False, False, True)


def test_the_releases_that_need_triton_for_every_log_probability_are_the_ones_whose_source_says_so():
    """TRL 1.15 patches a fused LM head into every model and its kernel imports Triton unconditionally (1.16 has a torch fallback)."""
    import trl.trainer.utils as trl_utils

    kernel = Path(trl.__file__).parent / "kernels" / "chunked_logprob.py"
    unconditional = kernel.exists() and re.search(r"^import triton$", kernel.read_text(), re.M) is not None
    assert (hasattr(trl_utils, "add_fused_lm_head") and unconditional) == (versions.TRL_VERSION in versions.TRITON_ONLY_LOGPROBS)


def test_a_trl_that_needs_triton_is_refused_at_config_time_on_a_cpu_naming_the_fix(monkeypatch, tmp_path):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(versions, "TRL_VERSION", Version("1.15.0"))
    installed = f"TRL 1.15.0 (transformers {transformers.__version__})"
    with pytest.raises(ValueError, match=rf"^RLLMGRPOConfig: {re.escape(installed)} computes every log-probability with a Triton kernel"):
        RLLMGRPOConfig(output_dir=str(tmp_path), use_cpu=True, num_generations=4)
    assert versions.logprob_problem("cuda") is None or "Triton is not installed" in versions.logprob_problem("cuda")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert versions.logprob_problem("cpu") is None or "Triton is not installed" in versions.logprob_problem("cpu")
    monkeypatch.setattr(versions, "TRL_VERSION", Version("1.16.0"))
    monkeypatch.delenv("TRITON_INTERPRET")
    assert versions.logprob_problem("cpu") is None


def test_describe_names_the_versions_and_the_paths():
    described = versions.describe()
    assert described["trl"] == trl.__version__ and described["transformers"] == transformers.__version__ and described["supported"]
    assert set(described["tool_paths"]) == {"tools", "environment_factory", "rollout_func"} and described["tool_paths"]["rollout_func"] is None


def test_a_real_training_step_changes_the_tiny_model(make_trainer, snapshot, expected_advantages):
    """One real GRPOTrainer step on each version: the advantages are rLLM's rloo of the gathered rewards, and parameters move."""
    trainer = make_trainer(adv_estimator="rloo", max_steps=1)
    before = snapshot(trainer.model)
    trainer.train()
    (record,) = trainer.records
    expected = expected_advantages(record["rewards_per_func"], [1.0, 0.5], 4, "rloo")
    torch.testing.assert_close(record["advantages"].double(), torch.as_tensor(expected), atol=1e-6, rtol=0)
    after = snapshot(trainer.model)
    assert any(not torch.equal(before[name], after[name]) for name in before), f"{INSTALLED}: no parameter changed in a step"


def test_the_estimator_state_is_saved_with_a_checkpoint_and_read_on_resume(make_trainer, tmp_path: Path):
    """``rae`` (stateful) on each version: TRL's checkpoint holds rllm_estimator_state.json; a resumed trainer reads it back
    before its first step (seen from ``on_train_begin``, which transformers calls after loading the checkpoint)."""
    trainer = make_trainer(adv_estimator="rae", max_steps=2, save_strategy="steps", save_steps=1)
    trainer.train()
    saved = tmp_path / "checkpoint-1" / "rllm_estimator_state.json"
    assert saved.exists(), sorted(p.name for p in tmp_path.iterdir())
    assert json.loads(saved.read_text())["estimators"]["rae"], "the saved state holds rae's baselines"
    seen: list[str] = []

    class AtTrainBegin(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            seen.append(resumed.estimator_state.to_json())

    resumed = make_trainer(adv_estimator="rae", max_steps=2, save_strategy="no")
    resumed.add_callback(AtTrainBegin())
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-1"))
    assert [json.loads(s) for s in seen] == [json.loads(saved.read_text())]


DOCS = Path(__file__).resolve().parents[2] / "docs" / "trl.md"


def _docs_table(heading: str) -> list[list[str]]:
    """The rows (cells, backticks kept) of the first table after ``heading`` in docs/trl.md whose header starts with ``| {heading}``."""
    lines = DOCS.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {heading} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_docs_tables_are_the_adapter_s():
    hooks = {row[0].strip("`").split(".")[-1]: (row[1].strip("`"), row[2]) for row in _docs_table("method")}
    assert hooks == {hook.name: (", ".join(hook.parameters), hook.feature.split(" (")[0]) for hook in versions.HOOKS}
    paths = {re.match(r"`(\w+)=", row[0]).group(1): row[1] for row in _docs_table("path")}
    assert set(paths) == {path.argument for path in versions.TOOL_PATHS}
    for path in versions.TOOL_PATHS:
        expected = "any" if path.min_transformers is None else f"{path.min_transformers} or later (`jmespath` installed below 5.13)"
        assert paths[path.argument] == expected
    assert versions.PARSER_WITHOUT_JMESPATH.release[:2] == (5, 13)


def test_the_documented_transformers_field_difference_holds():
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    gone = {"overwrite_output_dir", "save_safetensors"}
    assert (gone <= fields) if versions.TRANSFORMERS_VERSION.major == 4 else not (gone & fields)


def test_the_tool_path_check_reads_the_arguments_as_trl_does():
    """By keyword or position; an empty ``tools=[]`` asks for no tool loop (TRL reads it as falsy)."""
    versions.check_tool_paths(GRPOTrainer.__init__, (), {"tools": [], "environment_factory": None}, where="w")
    names = list(inspect.signature(GRPOTrainer.__init__).parameters)[1:]
    for path in versions.TOOL_PATHS:
        value = PATH_ARGUMENTS[path.argument]
        positional = tuple(value if name == path.argument else None for name in names[: names.index(path.argument) + 1])
        for args, kwargs in (((), {path.argument: value}), (positional, {})):
            if versions.tool_path_problem(path) is None:
                versions.check_tool_paths(GRPOTrainer.__init__, args, kwargs, where="w")
            else:
                with pytest.raises(ValueError, match=rf"^w: {path.argument}= "):
                    versions.check_tool_paths(GRPOTrainer.__init__, args, kwargs, where="w")
