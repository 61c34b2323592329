"""Agent loops that return what verl's contract allows and what it does not, for ``verl-rehearse``'s tests.

Each model turn is followed by an observation ``" seen {turn}."``; ``TwoTurns`` is the correct form, the others
change one thing.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput


class TwoTurns(AgentLoopBase):
    """Two model turns in one row, model tokens 1 and observation tokens 0; reward 1.0."""

    model, environment = 1, 0  # the mask given to each

    async def turns(self, sampling_params: dict[str, Any], kwargs: dict[str, Any]) -> tuple[list[int], list[int], list[int]]:
        prompt = self.tokenizer.apply_chat_template(list(kwargs["raw_prompt"]), tokenize=True, add_generation_prompt=True, return_dict=False)
        context, response, mask = list(prompt), [], []
        for turn in range(2):
            reply = await self.server_manager.generate(request_id=uuid4().hex, prompt_ids=context, sampling_params=sampling_params)
            said = list(reply.token_ids)
            seen = self.tokenizer.encode(f" seen {turn}.", add_special_tokens=False)
            response += said + seen
            mask += [self.model] * len(said) + [self.environment] * len(seen)
            context += said + seen
        return prompt, response, mask

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        prompt, response, mask = await self.turns(sampling_params, kwargs)
        return AgentLoopOutput(prompt_ids=prompt, response_ids=response, response_mask=mask, reward_score=1.0, num_turns=5, metrics=AgentLoopMetrics())


class Inverted(TwoTurns):
    """response_mask 0 on the model's tokens and 1 on the observations."""

    model, environment = 0, 1


class AllOnes(TwoTurns):
    """response_mask 1 on every token, the observations' too."""

    environment = 1


class Unscored(TwoTurns):
    """Leaves reward_score None, as verl's own loops do."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        prompt, response, mask = await self.turns(sampling_params, kwargs)
        return AgentLoopOutput(prompt_ids=prompt, response_ids=response, response_mask=mask, num_turns=5, metrics=AgentLoopMetrics())


class ShortMask(TwoTurns):
    """response_mask one entry shorter than response_ids."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        prompt, response, mask = await self.turns(sampling_params, kwargs)
        return AgentLoopOutput(prompt_ids=prompt, response_ids=response, response_mask=mask[:-1], reward_score=1.0, metrics=AgentLoopMetrics())


class NoSuchToken(TwoTurns):
    """A response id past the tokenizer's vocabulary."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        prompt, response, mask = await self.turns(sampling_params, kwargs)
        response[-1] = 10**6
        return AgentLoopOutput(prompt_ids=prompt, response_ids=response, response_mask=mask, reward_score=1.0, metrics=AgentLoopMetrics())


class EmptyEverySecond(TwoTurns):
    """Returns ``[]`` for rollout 1 of each prompt, one output otherwise."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        return [] if kwargs["session_id"] == 1 else await super().run(sampling_params, **kwargs)


class Empty(AgentLoopBase):
    """Returns ``[]``: a session without output."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        return []


class Invalid(AgentLoopBase):
    """Builds an AgentLoopOutput pydantic refuses: a mask entry that is no integer, no metrics."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        return AgentLoopOutput(prompt_ids=[1, 2], response_ids=[3], response_mask=["x"])


class ReturnsDict(AgentLoopBase):
    """Returns the output's fields as a dict, not an AgentLoopOutput."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        return {"prompt_ids": [1], "response_ids": [2], "response_mask": [1]}


class Raises(AgentLoopBase):
    """Raises inside run()."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        raise RuntimeError("the environment is down")
