"""``verl-check`` knows ``algorithm.rllm_reward_shapers``: each shaper in the resolved table with every option, tried on toy
batches with any estimator (verl's own included, on the legacy and the v1 trainer), refused where the run would not shape."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")
pytest.importorskip("hydra")

from rllm_verl.tools.check import verl_check
from rllm_verl.versions import verl_features

SHAPERS = "+algorithm.rllm_reward_shapers"
ALL_SIZES = [1, 2, 3, 4, 8]


@pytest.mark.parametrize("trainer", ["v1", "legacy"])
@pytest.mark.parametrize("estimator", ["grpo", "rllm_rloo", "rllm_gigpo"])
def test_shapers_are_known_resolved_with_every_option_and_tried_on_toy_batches(estimator, trainer):
    if not verl_features().v1_trainer:  # verl < 0.9: the legacy trainer only, and no trainer.use_v1 key
        if trainer == "v1":
            pytest.skip(f"verl {verl_features().version} has no v1 trainer")
        chosen = []
    else:
        chosen = [f"trainer.use_v1={'true' if trainer == 'v1' else 'false'}"]
    report = verl_check([f"algorithm.adv_estimator={estimator}", *chosen, f"{SHAPERS}=[{{name:dapo_overlong,max_length:4,buffer:2}},length_penalty]"])
    assert report.ok, report
    assert not any("rllm_reward_shapers" in w for w in report.warnings)
    rows = [row for row in report.resolved if row[0].startswith("shaper")]
    assert rows == [
        ["shaper 1", "dapo_overlong(max_length=4, buffer=2, factor=1.0) of rllm-plugins (built-in)", "algorithm.rllm_reward_shapers[0]"],
        ["shaper 2", "length_penalty(output_weight=0.25, input_weight=0.1, turns_weight=0.1) of rllm-plugins (built-in)", "algorithm.rllm_reward_shapers[1]"],
    ]
    assert report.trial_group_sizes[:1] == [1]


def test_the_shapers_key_is_the_one_the_run_reads():
    from rllm_verl.compute.shaping import CONFIG_KEY
    from rllm_verl.tools.resolved import SHAPERS as KEY

    assert KEY == CONFIG_KEY


@pytest.mark.parametrize("key", ["rllm_reward_shaper", "reward_shapers", "rllm_rewards_shapers"])
def test_a_near_miss_of_the_shapers_key_is_refused_naming_it(key):
    report = verl_check(["algorithm.adv_estimator=grpo", f"+algorithm.{key}=[length_penalty]"])
    assert not report.ok
    assert report.errors == [
        f"algorithm.{key}=['length_penalty']: no key verl or rllm-plugins reads, so a run would ignore it. Did you mean algorithm.rllm_reward_shapers?"
    ]


def test_a_bad_option_is_refused_before_launch_naming_the_entry():
    report = verl_check(["algorithm.adv_estimator=grpo", f"{SHAPERS}=[{{name:dapo_overlong,max_length:4,buffer:8}}]"])
    assert not report.ok
    assert report.errors == [
        "algorithm.rllm_reward_shapers[0]: fails on a small input with the options {'max_length': 4, 'buffer': 8}: reward shaper 'dapo_overlong' "
        "(rllm-plugins (built-in)) for role 'all_groups': buffer must be at most max_length (4), got 8"
    ]


def test_shapers_are_refused_when_the_trainer_does_not_load_rllm_plugins(monkeypatch):
    monkeypatch.delenv("VERL_USE_EXTERNAL_MODULES", raising=False)
    monkeypatch.setenv("VERL_USE_EXTERNAL_PLUGINS", "none")
    report = verl_check(["algorithm.adv_estimator=grpo", f"{SHAPERS}=[length_penalty]"])
    assert not report.ok
    assert "verl would not apply algorithm.rllm_reward_shapers ('length_penalty'; rllm-plugins applies them, with any estimator" in report.errors[0]
    assert "the run trains on unshaped rewards without a word" in report.errors[0]
