"""``import verl`` alone registers every rLLM estimator as ``rllm_<name>``; registration is idempotent and never breaks verl."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

pytest.importorskip("verl")

EXPECTED = {"rllm_grpo", "rllm_reinforce", "rllm_reinforce_plus_plus_baseline", "rllm_rloo", "rllm_prpo", "rllm_opo", "rllm_median_baseline"}


def _fresh_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, check=False)


def test_import_verl_alone_makes_the_rllm_names_visible_in_a_clean_interpreter():
    result = _fresh_python(
        "import json, sys, verl\n"
        "assert 'rllm_verl' in sys.modules or 'rllm_verl.plugin' in sys.modules\n"
        "from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY\n"
        "print(json.dumps(sorted(ADV_ESTIMATOR_REGISTRY)))"
    )
    assert result.returncode == 0, result.stderr
    names = set(json.loads(result.stdout.strip().splitlines()[-1]))
    assert names >= EXPECTED
    assert {"grpo", "rloo", "gae"} <= names  # verl's own names untouched


def test_a_failing_registration_warns_and_verl_still_imports():
    result = _fresh_python(
        "import rllm_plugins.registry as r\n"
        "def broken(): raise RuntimeError('plugin state exploded')\n"
        "r.available_estimators = broken\n"
        "import rllm_verl.registration as reg\n"
        "reg.available_estimators = broken\n"
        "import verl\n"
        "from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY\n"
        "print('rllm_rloo' in ADV_ESTIMATOR_REGISTRY, 'rloo' in ADV_ESTIMATOR_REGISTRY)"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "False True"
    assert "could not register the rllm_* advantage estimators into verl: RuntimeError: plugin state exploded" in result.stderr


def test_registering_again_is_a_no_op():
    from rllm_verl import register_estimators_into_verl
    from verl.trainer.ppo import core_algos

    before = dict(core_algos.ADV_ESTIMATOR_REGISTRY)
    names = register_estimators_into_verl()
    assert set(names) >= EXPECTED
    assert before == core_algos.ADV_ESTIMATOR_REGISTRY


def test_a_foreign_estimator_under_an_rllm_name_is_left_alone_with_a_warning(caplog):
    from rllm_verl import register_estimators_into_verl
    from verl.trainer.ppo import core_algos

    from rllm_plugins import register_rllm_adv_estimator, unregister_rllm_adv_estimator

    def foreign(**_):
        raise AssertionError("not ours")

    @register_rllm_adv_estimator("taken_name")
    def taken_name(rewards, **_):
        return rewards, rewards

    core_algos.ADV_ESTIMATOR_REGISTRY["rllm_taken_name"] = foreign
    try:
        with caplog.at_level(logging.WARNING, logger="rllm_verl.registration"):
            names = register_estimators_into_verl()
        assert core_algos.ADV_ESTIMATOR_REGISTRY["rllm_taken_name"] is foreign
        assert "rllm_taken_name" not in names
        assert "verl already has an advantage estimator 'rllm_taken_name'" in caplog.text
    finally:
        del core_algos.ADV_ESTIMATOR_REGISTRY["rllm_taken_name"]
        unregister_rllm_adv_estimator("taken_name")


def test_an_estimator_registered_in_user_code_after_import_is_added_on_request():
    import numpy as np
    import torch
    from rllm_verl import register_estimators_into_verl
    from verl.trainer.ppo import core_algos

    from rllm_plugins import register_rllm_adv_estimator, unregister_rllm_adv_estimator

    @register_rllm_adv_estimator("best_of_group")
    def best_of_group(rewards, **_):
        advantages = [np.asarray(r, dtype=float) - np.max(r) for r in rewards]
        return advantages, advantages

    try:
        assert "rllm_best_of_group" in register_estimators_into_verl()
        advantages, _ = core_algos.get_adv_estimator_fn("rllm_best_of_group")(
            token_level_rewards=torch.tensor([[1.0], [3.0], [2.0]]), response_mask=torch.ones(3, 1), index=np.array(["g"] * 3, dtype=object)
        )
        assert advantages[:, 0].tolist() == [-2.0, 0.0, -1.0]
    finally:
        core_algos.ADV_ESTIMATOR_REGISTRY.pop("rllm_best_of_group", None)
        unregister_rllm_adv_estimator("best_of_group")
