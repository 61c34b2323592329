"""What ``verl-rehearse`` puts in place of the GPU parts of a verl run: the rollout server, the reward, the critic.

- :class:`ScriptedServer` answers each ``generate`` with one of the scripted replies (drawn by a seeded RNG) and
  records every call (:class:`~rllm_verl.tools.loop_outputs.Call`), so the rows' masks can be checked.
- :class:`Scorer` scores a rollout whose loop left ``reward_score=None`` (verl's own loops do; verl's reward loop
  scores them): with ``custom_reward_function`` configured, verl's own reward manager calls it, as verl's
  ``RewardLoopWorker`` does; otherwise a stand-in gives 1.0 when the last output's response text contains the ground
  truth, else 0.0.
- :func:`critic_values` are a stand-in critic's values for a value-based estimator: one number for every token, or
  one per model turn (the last one repeated).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from typing import Any

from rllm_verl.tools.loop_outputs import Call

__all__ = ["STAND_IN_REWARD", "Scorer", "ScriptedServer", "critic_values", "parse_critic_values"]

STAND_IN_REWARD = "1.0 when the last output's response text contains the ground truth, else 0.0"


class ScriptedServer:
    """A stand-in for verl's rollout server: each ``generate`` answers with one of ``replies`` (tokenized), drawn by ``rng``."""

    def __init__(self, tokenizer: Any, replies: Sequence[str], rng: random.Random) -> None:
        self.tokenizer, self.replies, self.rng = tokenizer, list(replies), rng
        self.calls: list[Call] = []

    async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        reply = self.rng.choice(self.replies)
        token_ids = self.tokenizer.encode(reply, add_special_tokens=False)
        self.calls.append(Call(tuple(int(t) for t in prompt_ids), tuple(token_ids), reply))
        return TokenOutput(token_ids=token_ids)


class Scorer:
    """Scores a rollout's outputs whose last ``reward_score`` is None: the configured ``custom_reward_function`` through verl's
    reward manager, else the stand-in (:data:`STAND_IN_REWARD`). ``described`` says which, for the report."""

    def __init__(self, config: Any, tokenizer: Any) -> None:
        from omegaconf import OmegaConf

        self.tokenizer = tokenizer
        self.config, self.manager = None, None
        self.used = False  # whether a rollout needed scoring
        path = OmegaConf.select(config, "reward.custom_reward_function.path", default=None) or OmegaConf.select(
            config, "custom_reward_function.path", default=None
        )
        if path:
            from verl.experimental.reward_loop.reward_loop import migrate_legacy_reward_impl

            self.config = migrate_legacy_reward_impl(copy.deepcopy(config))
            function = self.config.reward.custom_reward_function
            self.described = f"custom_reward_function {function.name!r} of {function.path!r}, through verl's reward manager"
        else:
            self.described = f"a stand-in (no custom_reward_function configured): {STAND_IN_REWARD}"

    async def score(self, outputs: list[Any], kwargs: dict[str, Any]) -> None:
        """Set the last output's ``reward_score`` (and ``extra_fields['reward_extra_info']``) as verl's ``_compute_score`` does."""
        final = outputs[-1]
        if final.reward_score is not None:
            return
        self.used = True
        if self.config is None:
            text = self.tokenizer.decode(list(final.response_ids), skip_special_tokens=True)
            final.reward_score = float(str(kwargs["reward_model"]["ground_truth"]) in text)
            final.extra_fields["reward_extra_info"] = {"acc": final.reward_score}
            return
        if self.manager is None:  # built in the running event loop, which verl's reward manager keeps
            from verl.trainer.ppo.reward import load_reward_manager

            self.manager = load_reward_manager(self.config, self.tokenizer)
        result = await self.manager.run_single(_reward_batch(outputs, kwargs))
        final.reward_score = float(result["reward_score"])
        final.extra_fields["reward_extra_info"] = result["reward_extra_info"]


def _reward_batch(outputs: list[Any], kwargs: dict[str, Any]) -> Any:
    """The ``DataProto`` verl's ``AgentLoopWorker._compute_score`` hands the reward manager (text-only rows)."""
    import numpy as np
    import torch
    from tensordict import TensorDict
    from torch.nn.utils.rnn import pad_sequence
    from verl import DataProto

    prompts = [torch.tensor(o.prompt_ids, dtype=torch.int64) for o in outputs]
    responses = [torch.tensor(o.response_ids, dtype=torch.int64) for o in outputs]
    input_ids = [torch.cat([p, r]) for p, r in zip(prompts, responses, strict=True)]
    n = len(outputs)
    batch = TensorDict(
        {
            "prompts": pad_sequence(prompts, batch_first=True),
            "responses": pad_sequence(responses, batch_first=True),
            "input_ids": pad_sequence(input_ids, batch_first=True),
            "attention_mask": pad_sequence([torch.ones_like(i) for i in input_ids], batch_first=True),
            "position_ids": pad_sequence([torch.arange(i.numel()) for i in input_ids], batch_first=True),
        },
        batch_size=n,
    )
    non_tensor = {
        **{k: np.array([v] * n) for k, v in kwargs.items()},
        "__num_turns__": np.array([o.num_turns for o in outputs]),
        "tool_extra_fields": np.array([o.extra_fields for o in outputs], dtype=object),
    }
    return DataProto(batch=batch, non_tensor_batch=non_tensor)


def parse_critic_values(text: str) -> list[float]:
    """``--critic-values``: one number (every token), or comma-separated numbers (one per model turn, the last repeated)."""
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise ValueError(f"--critic-values takes a number or comma-separated numbers (one per model turn), got {text!r}") from None
    if not all(v == v and abs(v) != float("inf") for v in values):
        raise ValueError(f"--critic-values must be finite numbers, got {text!r}")
    return values


def critic_values(response_mask: Any, values: Sequence[float]) -> Any:
    """``(B, T)`` float32 values: ``values[0]`` on every token when one is given, else ``values[k]`` on model turn ``k``'s tokens
    (runs of ``response_mask == 1``; the last value for later turns) and 0 elsewhere."""
    import torch

    out = torch.full(response_mask.shape, float(values[0]), dtype=torch.float32)
    if len(values) == 1:
        return out
    out.zero_()
    for row, mask in enumerate(response_mask.tolist()):
        turn, inside = -1, False
        for t, m in enumerate(mask):
            if m == 1 and not inside:
                turn += 1
            inside = m == 1
            if inside:
                out[row, t] = values[min(turn, len(values) - 1)]
    return out
