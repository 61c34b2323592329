"""``verl-check`` knows every key rllm-plugins reads, judges transforms as the run applies them, ends in a verdict (never a
traceback), and shares the run's rules: a value given twice, an option typo reaching ``**kwargs``, a loss no adapter applies."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("verl")
pytest.importorskip("hydra")

import torch
from omegaconf import OmegaConf
from rllm_verl.tools import check as check_module
from rllm_verl.tools.check import verl_check
from rllm_verl.versions import verl_features
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

from rllm_plugins import register_rllm_adv_estimator, unregister_rllm_adv_estimator
from rllm_plugins.registry import get_estimator

GRPO = "algorithm.adv_estimator=rllm_grpo"
TRANSFORMS = "+algorithm.rllm_advantage_transforms"
ALL_SIZES = [1, 2, 3, 4, 8]


def test_the_transforms_key_is_known_and_each_transform_is_in_the_resolved_table_with_every_option():
    report = verl_check([GRPO, f"{TRANSFORMS}=[{{name:clip,max:1.0}},whiten]"])
    assert report.ok, report
    assert report.warnings == []  # before: "no key verl or rllm-plugins reads (a run ignores it ...)"
    assert report.resolved[1:3] == [
        ["transform 1", "clip(min=None, max=1.0) of rllm-plugins (built-in)", "algorithm.rllm_advantage_transforms[0]"],
        ["transform 2", "whiten(std=True, eps=1e-08) of rllm-plugins (built-in)", "algorithm.rllm_advantage_transforms[1]"],
    ]
    assert report.trial_group_sizes == ALL_SIZES


def test_the_transforms_key_is_the_one_the_run_reads():
    from rllm_verl.compute.transforms import CONFIG_KEY
    from rllm_verl.tools.resolved import TRANSFORMS as KEY

    assert KEY == CONFIG_KEY


@pytest.mark.parametrize("key", ["rllm_advantage_transform", "advantage_transforms", "rllm_advantages_transforms"])
def test_a_near_miss_of_the_transforms_key_is_refused_naming_it(key):
    report = verl_check([GRPO, f"+algorithm.{key}=[clip]"])
    assert not report.ok  # before: a warning and the verdict OK, the run ignoring the transforms
    assert report.errors == [
        f"algorithm.{key}=['clip']: no key verl or rllm-plugins reads, so a run would ignore it. Did you mean algorithm.rllm_advantage_transforms?"
    ]


@pytest.fixture
def rllm_plugins_not_loaded(monkeypatch):
    """The environment of a trainer that does not load rllm-plugins, on any verl: no module line, entry points off."""
    monkeypatch.delenv("VERL_USE_EXTERNAL_MODULES", raising=False)
    monkeypatch.setenv("VERL_USE_EXTERNAL_PLUGINS", "none")


@pytest.mark.parametrize("estimator", ["grpo", "rllm_grpo", "gae"])
def test_transforms_are_refused_with_any_estimator_when_the_trainer_does_not_load_rllm_plugins(rllm_plugins_not_loaded, estimator):
    report = verl_check([f"algorithm.adv_estimator={estimator}", f"{TRANSFORMS}=[{{name:clip,max:1.0}}]", "critic.enable=true"])
    assert not report.ok  # before (verl's own grpo): OK, and the run trained on untransformed advantages
    silent = (
        "verl would not apply algorithm.rllm_advantage_transforms ('clip'; rllm-plugins applies them, with any estimator, verl's own "
        "included): the run trains on untransformed advantages without a word"
    )
    if verl_features().entry_points:
        expected = (
            f"VERL_USE_EXTERNAL_PLUGINS=none turns verl's plugin discovery off, so {silent}. Fix: unset it, or set "
            "VERL_USE_EXTERNAL_PLUGINS=rllm_plugins. The entry-point name is 'rllm_plugins' (group verl.plugins), not the distribution "
            "name 'rllm-plugins'."
        )
    else:
        expected = (
            f"verl {verl_features().version} has no verl.plugins entry points (they came with verl 0.9.0): import verl loads rllm-plugins "
            f"only when VERL_USE_EXTERNAL_MODULES names rllm_verl.plugin, so {silent} (in verl's TaskRunner). Fix: export "
            "VERL_USE_EXTERNAL_MODULES=rllm_verl.plugin in the shell that starts the driver (and ray start, on a cluster you start yourself)"
        )
    assert report.errors == [expected]


def test_verls_own_estimator_with_transforms_is_tried_on_toy_batches_through_the_trainers_function():
    report = verl_check(["algorithm.adv_estimator=grpo", f"{TRANSFORMS}=[{{name:clip,max:1.0}},whiten]"])
    assert report.ok, report
    assert report.trial_group_sizes == ALL_SIZES  # before: no trial for verl's own estimators
    assert report.provider.startswith("verl's own estimator")


KL_REFUSAL = (
    "algorithm.rllm_advantage_transforms: advantage transform 'kl_shaping' reads the reference policy's log-probabilities "
    "(data.batch['ref_log_prob']), which verl computes only when it runs a reference policy; this config runs none, so the first "
    "advantage step would fail. Fix: set actor_rollout_ref.actor.use_kl_loss=true (or algorithm.use_kl_in_reward=true), or drop the transform"
)


def _trainer(name: str) -> list[str]:
    """The overrides selecting verl's ``legacy`` or ``v1`` trainer (verl < 0.9 has only the legacy one, and no key for it)."""
    if not verl_features().v1_trainer:
        if name == "v1":
            pytest.skip("this verl has no v1 trainer")
        return []
    return [f"trainer.use_v1={str(name == 'v1').lower()}"]


@pytest.mark.parametrize("trainer", ["legacy", "v1"])
def test_kl_shaping_needs_a_reference_policy_and_runs_on_a_toy_batch_with_log_probs(trainer):
    trainer = _trainer(trainer)
    refused = verl_check([GRPO, f"{TRANSFORMS}=[kl_shaping]", *trainer])
    assert refused.errors == [KL_REFUSAL]  # before: OK, then a failure at the first advantage step
    for reference in ("actor_rollout_ref.actor.use_kl_loss=true", "algorithm.use_kl_in_reward=true"):
        report = verl_check([GRPO, f"{TRANSFORMS}=[kl_shaping]", *trainer, reference])
        assert report.ok, report  # before: refused, the toy batch had no log-probs
        assert report.trial_group_sizes == ALL_SIZES


def test_needs_reference_policy_is_verls_own_rule():
    from rllm_verl.tools.check import _compose, needs_reference_policy

    for overrides, needed in (
        ([], False),
        (["actor_rollout_ref.actor.use_kl_loss=true"], True),
        (["algorithm.use_kl_in_reward=true"], True),
    ):
        config = _compose(overrides, "ppo_trainer", None)
        assert needs_reference_policy(config) is needed
        try:  # verl >= 0.9 states the rule as a function of the config
            from verl.trainer.ppo.utils import need_reference_policy
        except ImportError:
            continue
        import inspect

        if list(inspect.signature(need_reference_policy).parameters) == ["config"]:
            assert bool(need_reference_policy(config)) is needed


@pytest.mark.parametrize("trainer", ["legacy", "v1"])
def test_codapo_is_judged_on_a_toy_batch_with_log_probs(trainer):
    trainer = _trainer(trainer)
    for extra in ([], ["algorithm.use_kl_in_reward=true"]):  # with the KL penalty in the rewards, codapo reads the scores
        report = verl_check([GRPO, f"{TRANSFORMS}=[codapo]", *trainer, *extra])
        assert report.ok, report  # before: refused (the toy batch had no old_log_probs), though compute_advantage runs it
        assert report.trial_group_sizes == ALL_SIZES


SHELL = "in the shell that starts the driver (and ray start, on a cluster you start yourself)"


@pytest.mark.parametrize(
    ("modules", "problems", "fixed"),
    [
        ("json, rllm_verl.plugin", "' rllm_verl.plugin' has spaces around it", "json,rllm_verl.plugin"),
        ("rllm_verl.plugins", "'rllm_verl.plugins' is no module here (did you mean 'rllm_verl.plugin'?)", "rllm_verl.plugin"),
        ("rllm_verl.plugin,", "the list holds an empty name (a comma too many)", "rllm_verl.plugin"),
        ("rllm_verl.plugin,no_such_module_x", "'no_such_module_x' is no module here", "rllm_verl.plugin"),
    ],
)
def test_a_malformed_module_list_ends_in_a_verdict_with_the_corrected_line(monkeypatch, modules, problems, fixed):
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", modules)
    report = verl_check([GRPO])  # before: a traceback (import verl fails on the name)
    assert not report.ok
    assert report.errors == [
        f"import verl fails in every process (the driver and Ray's workers): verl {verl_features().version} imports each comma-separated "
        f"name of VERL_USE_EXTERNAL_MODULES={modules!r} as is, and {problems}. Fix: export VERL_USE_EXTERNAL_MODULES={fixed} {SHELL}"
    ]
    assert report.registration == "not checked: verl cannot be imported"


def test_a_corrected_module_list_that_would_still_not_load_rllm_plugins_gets_the_line_that_does(monkeypatch):
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", "json,")
    (message,) = verl_check([GRPO]).errors
    fix = message.split(" Fix: ", 1)[1]
    if verl_features().entry_points:  # verl >= 0.9 loads the entry point: the list needs no rllm_verl.plugin
        assert fix == f"export VERL_USE_EXTERNAL_MODULES=json {SHELL}"
    else:
        assert fix == f"export VERL_USE_EXTERNAL_MODULES=json,rllm_verl.plugin {SHELL}"


def test_the_malformed_module_lists_do_fail_import_verl_as_the_verdict_says(tmp_path):
    import os
    import subprocess
    import sys

    for modules in ("json, rllm_verl.plugin", "rllm_verl.plugins", "json,"):
        env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": modules}
        result = subprocess.run([sys.executable, "-c", "import verl"], env=env, capture_output=True, text=True, cwd=tmp_path)
        assert result.returncode != 0, modules


def test_an_exception_where_no_check_expects_one_ends_in_a_verdict_naming_it(monkeypatch):
    import rllm_verl.tools.resolved as resolved

    def broken(*args, **kwargs):
        raise RuntimeError("a plugin's agent loop registry is broken")

    monkeypatch.setattr(resolved, "context_rows", broken)  # a failure inside the check, where nothing catches it
    report = verl_check([GRPO])
    assert not report.ok
    (message,) = report.errors
    assert message.startswith("the check stopped at an unexpected RuntimeError: a plugin's agent loop registry is broken (raised in ")
    assert message.endswith(
        "test_check_preflight.py:" + str(broken.__code__.co_firstlineno + 1) + "). Fix what it names; if it names rllm-plugins itself, report it with this line"
    )
    assert check_module.main([GRPO]) == 1  # the command prints the verdict and exits 1


def test_an_option_typo_for_a_kwargs_estimator_is_refused_by_verl_check():
    @register_rllm_adv_estimator("h_trim_verl")
    def trimmed(rewards, trim: float = 0.0, **kwargs):
        return [r - trim for r in rewards], [r - trim for r in rewards]

    try:
        report = verl_check(["algorithm.adv_estimator=rllm_h_trim_verl", "+algorithm.rllm_estimator_kwargs.trimm=0.5"])
        provider = get_estimator("h_trim_verl").provider
    finally:
        unregister_rllm_adv_estimator("h_trim_verl")
    assert not report.ok  # before: OK, and the run used trim=0.0
    (message,) = report.errors
    assert f"unknown option 'trimm' for estimator 'h_trim_verl' ({provider}). Did you mean 'trim'?" in message


def _multi_turn_batch():
    mask = torch.tensor([[1, 1, 0, 1], [1, 0, 1, 1], [1, 1, 1, 0], [1, 0, 0, 1]], dtype=torch.float32)
    rewards = torch.zeros(4, 4)
    rewards[:, 3] = torch.tensor([1.0, 0.0, 0.5, 1.0])
    responses = torch.tensor([[5, 5, 1, 6], [5, 2, 6, 6], [5, 5, 5, 0], [5, 1, 1, 6]])
    index = np.array(["p", "p", "q", "q"], dtype=object)
    return DataProto.from_dict(tensors={"responses": responses, "response_mask": mask, "token_level_rewards": rewards}, non_tensors={"uid": index})


def test_gamma_given_twice_is_refused_by_the_run_with_verl_checks_words():
    twice = (
        "gamma is set twice with different values: algorithm.gamma=0.9 and algorithm.rllm_estimator_kwargs.gamma=0.5 (the estimator "
        "would take algorithm.rllm_estimator_kwargs.gamma); set it in one place"
    )
    config = OmegaConf.create({"adv_estimator": "rllm_gigpo", "gamma": 0.9, "norm_adv_by_std_in_grpo": True, "rllm_estimator_kwargs": {"gamma": 0.5}})
    with pytest.raises(ValueError) as error:  # before: the run took 0.5 without a word
        compute_advantage(_multi_turn_batch(), adv_estimator="rllm_gigpo", gamma=0.9, config=config)
    assert str(error.value).endswith(f": {twice}")
    report = verl_check(["algorithm.adv_estimator=rllm_gigpo", "algorithm.gamma=0.9", "+algorithm.rllm_estimator_kwargs.gamma=0.5"])
    assert report.errors == [twice]
    # verl's default algorithm.gamma (1.0) is no second value, in the run and in the check alike
    config.gamma = 1.0
    compute_advantage(_multi_turn_batch(), adv_estimator="rllm_gigpo", gamma=1.0, config=config)
    assert verl_check(["algorithm.adv_estimator=rllm_gigpo", "+algorithm.rllm_estimator_kwargs.gamma=0.5"]).ok


def test_the_defaults_the_twice_rule_compares_with_are_verls_own():
    from rllm_verl.compute.steps import VERL_DEFAULTS
    from rllm_verl.tools.check import _compose

    algorithm = _compose([], "ppo_trainer", None).algorithm
    assert {key: algorithm[key] for key in VERL_DEFAULTS} == VERL_DEFAULTS


def test_an_estimator_whose_loss_verl_does_not_apply_is_named_in_a_warning():
    report = verl_check(["algorithm.adv_estimator=rllm_echo"])
    assert report.ok, report
    assert (
        "estimator 'rllm_echo': verl's actor applies its own loss, not ECHO's auxiliary cross-entropy loss on environment-observation "
        "tokens (env_loss_coef); the run trains on the advantages of 'echo' without that term, which is not the whole method. Apply the "
        "term in your trainer's loss, or choose another estimator"
    ) in report.warnings
    assert not any("loss" in w for w in verl_check([GRPO]).warnings)
