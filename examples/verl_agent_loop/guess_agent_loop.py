"""A minimal verl agent loop to copy: the model guesses a secret word, the environment answers each guess.

Two forms of the same loop, one per way verl takes a rollout (docs/agent_loops.md):

- :class:`GuessAgentLoop` returns one ``AgentLoopOutput`` per rollout: every turn in one row, the model's tokens
  with ``response_mask`` 1 and the environment's answers with 0. Both of verl's trainers take it.
- :class:`GuessSessionAgentLoop` returns a list, one ``AgentLoopOutput`` per model turn (a session): each output's
  ``prompt_ids`` is the whole context the model saw, its ``response_ids`` only that turn's reply. Only verl's v1
  trainer (``trainer.use_v1=true``, the default) takes a list.

The secret is the prompt's ``reward_model.ground_truth`` (a dataset column verl passes to ``run`` as a keyword).
Register the loops in ``agent_loops.yaml`` and select one with ``actor_rollout_ref.rollout.agent.default_agent_loop``;
rehearse on a CPU with ``rllm-plugins verl-rehearse ... --agent-loop-config agent_loops.yaml --name guess``.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

MAX_TURNS = 2


def answer(secret: str, guess: str) -> str:
    """The environment: ``" yes."`` when the guess names the secret, else ``" no."``."""
    return " yes." if secret in guess else " no."


class GuessAgentLoop(AgentLoopBase):
    """Up to ``MAX_TURNS`` guesses in one row; reward 1.0 when a guess names the secret, else 0.0."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        secret = str(kwargs["reward_model"]["ground_truth"])
        prompt_ids = self.tokenizer.apply_chat_template(list(kwargs["raw_prompt"]), tokenize=True, add_generation_prompt=True, return_dict=False)
        context = list(prompt_ids)
        response_ids: list[int] = []
        response_mask: list[int] = []
        anchor_states: list[str] = []  # what the model observed when it acted, one per turn (read by rllm_gigpo)
        reward = 0.0
        for turn in range(MAX_TURNS):
            anchor_states.append(f"turn {turn}")
            reply = await self.server_manager.generate(request_id=uuid4().hex, prompt_ids=context, sampling_params=sampling_params)
            guess = list(reply.token_ids)
            response_ids += guess
            response_mask += [1] * len(guess)  # the model's tokens: 1
            context += guess
            said = answer(secret, self.tokenizer.decode(guess))
            if said == " yes.":
                reward = 1.0
                break
            observation = self.tokenizer.encode(said, add_special_tokens=False)
            response_ids += observation
            response_mask += [0] * len(observation)  # the environment's tokens: 0
            context += observation
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=response_mask,
            reward_score=reward,
            num_turns=2 * len(anchor_states) + 1,
            metrics=AgentLoopMetrics(),
            extra_fields={"anchor_states": anchor_states},
        )


class GuessSessionAgentLoop(AgentLoopBase):
    """The same game as a session: one output per guess; the last output's reward_score is the session's."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:
        secret = str(kwargs["reward_model"]["ground_truth"])
        context = self.tokenizer.apply_chat_template(list(kwargs["raw_prompt"]), tokenize=True, add_generation_prompt=True, return_dict=False)
        outputs: list[AgentLoopOutput] = []
        for _ in range(MAX_TURNS):
            reply = await self.server_manager.generate(request_id=uuid4().hex, prompt_ids=context, sampling_params=sampling_params)
            guess = list(reply.token_ids)
            outputs.append(
                AgentLoopOutput(prompt_ids=list(context), response_ids=guess, response_mask=[1] * len(guess), num_turns=2, metrics=AgentLoopMetrics())
            )
            said = answer(secret, self.tokenizer.decode(guess))
            if said == " yes.":
                break
            context += guess + self.tokenizer.encode(said, add_special_tokens=False)
        outputs[-1].reward_score = 1.0 if said == " yes." else 0.0
        return outputs
