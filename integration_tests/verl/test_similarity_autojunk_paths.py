"""gigpo's ``similarity_autojunk`` reaches the estimator in the core, verl and TRL: on long token states (where difflib's
autojunk changes the ratio) each path gives the collector's advantages with it on and with it off, and the two differ."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("verl")
pytest.importorskip("trl")

from rllm_plugins.testing.matrix import Call, Sample, Traj, installed_paths
from rllm_plugins.testing.matrix.paths import COLLECTOR

A = (3, 4) * 150 + (3,)  # 301 environment tokens, each kind over 1% of them: autojunk ignores both
B = (4, 3) * 150 + (4,)  # exact ratio against A: 0.997; with autojunk: 0


def long_state_sample(seed: int) -> Sample:
    """Task groups of two-step trajectories whose second step is anchored at A or B (the first at the prompt): the clusters
    do not depend on the order states are visited in, so every path's visit order gives the same groups."""
    rng = np.random.default_rng(seed)
    groups = []
    for _ in range(3):
        trajs = []
        for _ in range(int(rng.integers(2, 5))):
            rewards = (float(rng.integers(0, 3)) / 2, float(rng.integers(0, 3)) / 2)
            trajs.append(Traj(sum(rewards), rewards, (1, 2), ((), A if rng.integers(0, 2) else B)))
        groups.append(tuple(trajs))
    return Sample(tuple(groups), "step")


@pytest.fixture(scope="module")
def paths():
    return {p.name: p for p in installed_paths() if p.name in ("verl_step_bridge", "trl_turn")}


@pytest.mark.parametrize("path", ["verl_step_bridge", "trl_turn"])
def test_similarity_autojunk_reaches_gigpo_on_verl_and_trl_as_in_the_core(paths, path):
    sample = long_state_sample(1)
    outputs = {}
    for autojunk in (False, True):
        call = Call("gigpo", {"anchor_similarity": 0.9, "similarity_autojunk": autojunk})
        want = COLLECTOR.run(call, sample, None).advantages
        got = paths[path].run(call, sample, None).advantages
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
        outputs[autojunk] = want
    assert not np.allclose(outputs[False], outputs[True])


def test_the_config_steps_take_the_option_and_refuse_a_non_bool(paths):
    from rllm_trl.config import RLLMGRPOConfig

    RLLMGRPOConfig(output_dir="unused", use_cpu=True, bf16=False, adv_estimator="gigpo", adv_estimator_kwargs={"similarity_autojunk": True})
    with pytest.raises(ValueError, match="similarity_autojunk"):
        RLLMGRPOConfig(output_dir="unused", use_cpu=True, bf16=False, adv_estimator="gigpo", adv_estimator_kwargs={"similarity_autojunk": "yes"})
