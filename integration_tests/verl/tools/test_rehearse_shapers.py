"""Reward shapers through ``verl-rehearse``: verl's own ``tool_agent`` loop with a calculator tool (a real agent loop, a scripted
server), its rows through verl's v1 advantage step. A probe shaper records the context the run hands it: the model's turns,
the tool's tokens between them and the prompt's, as the batch holds them (v1: read from the rows TransferQueue serves)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("verl")

from rllm_verl.tools.rehearse import rehearse
from rllm_verl.versions import verl_features

from rllm_plugins.shaping import register_reward_shaper, unregister_reward_shaper

TOOL_EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "verl_tool_agent"
CALL = '<tool_call>{"name": "calc", "arguments": {"a": 2, "b": 3}}</tool_call>'
LOOP = [
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
    "actor_rollout_ref.rollout.multi_turn.tool_config_path=tools.yaml",
    "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
]


@pytest.fixture
def probe(monkeypatch):
    monkeypatch.chdir(TOOL_EXAMPLE)
    seen: list[dict] = []

    @register_reward_shaper("test_rehearse_probe")
    def record(rewards, *, lengths, input_lengths, tool_lengths, turns):
        seen.append(
            {
                "rewards": rewards.tolist(),
                "lengths": lengths.tolist(),
                "inputs": input_lengths.tolist(),
                "tools": tool_lengths.tolist(),
                "turns": turns.tolist(),
            }
        )
        return -0.25 * turns

    yield seen
    unregister_reward_shaper("test_rehearse_probe")


@pytest.mark.parametrize("trainer", ["v1", "legacy"])
@pytest.mark.parametrize("estimator", ["rllm_grpo", "grpo"])
def test_a_shaper_reads_the_turns_the_tool_tokens_and_the_prompt_of_a_real_tool_agent_rollout(probe, estimator, trainer):
    if trainer == "v1" and not verl_features().v1_trainer:
        pytest.skip("verl < 0.9 has no v1 trainer")
    chosen = [] if not verl_features().v1_trainer else [f"trainer.use_v1={'true' if trainer == 'v1' else 'false'}"]
    overrides = [f"algorithm.adv_estimator={estimator}", *chosen, *LOOP, "+algorithm.rllm_reward_shapers=[test_rehearse_probe]"]
    rehearsal = rehearse(overrides, ["What is 2 + 3?"], [CALL, "The answer is 5.", "I do not know."], seed=1, ground_truth="answer is 5")
    run = probe[-1]  # the first call is the config-time trial
    rows = rehearsal.rows
    assert run["turns"] == [float(row.turns) for row in rows]
    tools = np.array(run["tools"])
    called = np.array([row.turns > 1 for row in rows])
    assert called.any() and (tools[called] > 0).all() and (tools[~called] == 0).all(), "tool tokens only where the calculator answered"
    assert len(set(run["inputs"])) == 1 and run["inputs"][0] > 0, "one prompt, the same tokens for every rollout"
    # the estimator compared the shaped rewards: grpo of (reward - 0.25 turns) within the prompt's group
    shaped = np.array([row.reward for row in rows]) - 0.25 * np.array(run["turns"])
    sd = shaped.std(ddof=0 if estimator == "rllm_grpo" else 1)
    want = (shaped - shaped.mean()) / (sd + 1e-6)
    np.testing.assert_allclose([row.advantages[0] for row in rows], want, rtol=0, atol=1e-4)
