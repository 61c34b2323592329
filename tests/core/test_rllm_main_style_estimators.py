"""An estimator written to rLLM main's signature, ``fn(rewards, algorithm_config, **kwargs)``, runs in every path.

rLLM main (rllm/trainer/algorithms/advantage.py, ``register_adv_estimator``) documents that signature
and its collector always passes ``algorithm_config``. Before, the derived batched form (what the verl
and TRL adapters call) passed none: ``TypeError: missing 1 required positional argument``.
"""

from __future__ import annotations

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, collect_reward_and_advantage_from_trajectory_groups, register_adv_estimator
from rllm_plugins import unregister_rllm_adv_estimator as unregister
from rllm_plugins.registry import get_estimator
from rllm_plugins.types import Step, Trajectory, TrajectoryGroup

NAME = "main_style_centred"


@pytest.fixture
def main_style():
    @register_adv_estimator(NAME)
    def estimator(rewards, algorithm_config, **kwargs):
        scale = [r.std() + 1e-6 if algorithm_config.norm_adv_by_std_in_grpo else 1.0 for r in rewards]
        out = [(r - r.mean()) / s for r, s in zip(rewards, scale, strict=True)]
        return out, out

    yield NAME
    unregister(NAME)


def _by_hand(groups, norm):
    out = []
    for g in groups:
        g = np.asarray(g, dtype=float)
        out.extend((g - g.mean()) / ((g.std() + 1e-6) if norm else 1.0))
    return out


@pytest.mark.parametrize("norm", [True, False])
def test_the_batched_form_gives_it_a_config_with_the_calls_flag(main_style, norm):
    values, offsets = np.array([1.0, 0.0, 0.5, 0.25]), np.array([0, 2, 4])
    got = get_estimator(main_style).spec.batched_form(values, offsets, norm_adv_by_std_in_grpo=norm)
    np.testing.assert_allclose(got, _by_hand([[1.0, 0.0], [0.5, 0.25]], norm))


def test_the_collector_passes_its_own_config(main_style):
    group = TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1])], reward=r) for r in (1.0, 0.0)], group_id="g")
    collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(estimator=main_style, norm_adv_by_std_in_grpo=False))
    assert [t.steps[0].advantage for t in group.trajectories] == [0.5, -0.5]
