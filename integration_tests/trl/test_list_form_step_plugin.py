"""TRL calls a list-form step plugin as the collector and ``rllm-plugins check`` do: ``anchor_states`` are anchor-group ids."""

from __future__ import annotations

import numpy as np
from rllm_trl.turns import local_turns, row_turns, step_advantages

from rllm_plugins.registry import register_rllm_adv_estimator, unregister_rllm_adv_estimator


def test_trl_hands_a_list_form_plugin_anchor_group_ids():
    received = []

    def recording(rewards, step_rewards, anchor_states=None, **_):
        received.append(anchor_states)
        out = [[np.zeros(len(t)) for t in g] for g in step_rewards]
        return out, out

    register_rllm_adv_estimator("recording_trl", level="step", needs_anchors=True)(recording)
    try:
        ids = np.array([[5, 6, 7, 8]] * 2)
        completion = np.ones((2, 4), dtype=np.int64)
        tool = np.array([[1, 0, 1, 1]] * 2)  # two turns per completion
        overrides = [{"anchor_states": ["a", "b"]}, {"anchor_states": ["a", "a"]}]
        prompt = {"prompt_ids": np.ones((2, 2)), "prompt_mask": np.ones((2, 2))}
        rows = row_turns(ids, completion, local_turns(completion, tool), overrides, with_anchors=True, **prompt)
        step_advantages(rows, np.array([1.0, 0.0]), 2, "recording_trl", {})
    finally:
        unregister_rllm_adv_estimator("recording_trl")
    assert received == [[[[0, 1], [0, 0]]]]  # states a, b / a, a as ids
