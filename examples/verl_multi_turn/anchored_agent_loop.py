"""A multi-turn verl agent loop that gives ``rllm_gigpo`` its anchor states: a toy "corridor" environment.

The agent walks a corridor of cells; each turn the model writes a move, the environment answers
with the cell it is now in. The observation text is the state GiGPO compares (two episodes that
reach cell 1 by different paths meet in one anchor group), so the loop returns it per turn in
``extra_fields["anchor_states"]``: verl's legacy trainer puts ``extra_fields`` into
``non_tensor_batch`` (where ``rllm_gigpo`` reads ``anchor_states``), its v1 trainer keeps them in
TransferQueue (where ``rllm_gigpo`` reads them through rllm-plugins' ``v1_batch`` extension). Without
``anchor_states`` the anchors are the environment tokens before each turn, which also works here:
the observation is exactly those tokens.

Register it in an agent-loop config file (``agent_loops.yaml`` beside this file) and select it with
``actor_rollout_ref.rollout.agent.default_agent_loop=corridor`` (launch overrides: ``launch.sh``).
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

CELLS = 4  # cells 0..3; the goal is the last one, three moves right
TURNS = 3


def step(cell: int, move_text: str) -> int:
    """The corridor's rule: a move text with more ``+`` than ``-`` goes right, else left (walls at both ends)."""
    right = move_text.count("+") > move_text.count("-")
    return min(CELLS - 1, cell + 1) if right else max(0, cell - 1)


@register("corridor")
class CorridorAgentLoop(AgentLoopBase):
    """``TURNS`` model turns; after each, the environment's observation (response_mask 0). Reward: 1 at the goal, else 0."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        prompt_ids = self.tokenizer.apply_chat_template(list(kwargs["raw_prompt"]), tokenize=True, add_generation_prompt=True, return_dict=False)
        cell, context = 0, list(prompt_ids)
        response_ids: list[int] = []
        response_mask: list[int] = []
        anchor_states: list[str] = []
        for _ in range(TURNS):
            anchor_states.append(f"cell {cell}")  # what the agent observes when it acts
            output = await self.server_manager.generate(request_id=uuid4().hex, prompt_ids=context, sampling_params=sampling_params)
            move = list(output.token_ids)
            cell = step(cell, self.tokenizer.decode(move))
            observation = self.tokenizer.encode(f" cell {cell}.", add_special_tokens=False)
            response_ids += move + observation
            response_mask += [1] * len(move) + [0] * len(observation)
            context += move + observation
            if cell == CELLS - 1:
                break
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=response_mask,
            reward_score=float(cell == CELLS - 1),
            num_turns=2 * len(anchor_states) + 1,
            metrics=AgentLoopMetrics(),
            extra_fields={"anchor_states": anchor_states},
        )
