"""Whether a ``rollout_func``'s ``env_mask`` marks the model's tokens (1) or, inverted, the environment's, whichever side speaks first.

Position 0 says nothing: an episode may open with the environment's observation. Two signals do,
both read from what TRL's own tool loop (``tools=``, ``environment_factory``) puts where:

- **where turns end**: the model stops at an end-of-turn token (``trainer.eos_token_ids``, what TRL
  counts as a finished completion), so the model's runs end there; TRL's tool results end with the chat
  template's next generation prompt instead. Runs of ``env_mask == 0`` ending at one while no run of
  ``env_mask == 1`` does is the inverted pattern;
- **where the sampling log-probabilities are**: the model's tokens carry the log-probability they were
  sampled with (almost surely non-zero); the environment's carry a filler, ``0.0`` in TRL's tool loop and in
  the documented contract. Non-zero ``logprobs`` only where ``env_mask`` is 0 is the inverted pattern.

A signal speaks only when its pattern is one-sided; the mask is reported as inverted when one signal says
so and none says the opposite (rollouts whose logprobs are all equal and whose turns end without an
end-of-turn token give no verdict: nothing is said).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MaskEvidence", "mask_evidence"]


@dataclass(frozen=True)
class MaskEvidence:
    """Counts over one batch: runs of each ``env_mask`` value that end at an end-of-turn token, and tokens with a non-zero logprob."""

    model_runs_ending_turn: int = 0
    environment_runs_ending_turn: int = 0
    model_sampled_tokens: int = 0
    environment_sampled_tokens: int = 0

    @staticmethod
    def _verdict(model: int, environment: int) -> bool | None:
        """True: as documented (1 on the model's), False: inverted, None: the signal does not tell."""
        if model and not environment:
            return True
        if environment and not model:
            return False
        return None

    @property
    def inverted(self) -> bool:
        """One signal says inverted and none says as documented."""
        verdicts = {
            self._verdict(self.model_runs_ending_turn, self.environment_runs_ending_turn),
            self._verdict(self.model_sampled_tokens, self.environment_sampled_tokens),
        }
        return False in verdicts and True not in verdicts

    def explain(self) -> str:
        """The one-sided patterns, in words."""
        said = []
        if self._verdict(self.model_runs_ending_turn, self.environment_runs_ending_turn) is False:
            said.append(f"{self.environment_runs_ending_turn} run(s) with env_mask 0 end at the end-of-turn token, none with env_mask 1 does")
        if self._verdict(self.model_sampled_tokens, self.environment_sampled_tokens) is False:
            said.append(f"the non-zero logprobs (sampled tokens) are on {self.environment_sampled_tokens} token(s) with env_mask 0, none with env_mask 1")
        return "; ".join(said)


def _runs(mask: Sequence[int]) -> list[tuple[int, int, int]]:
    """``(value, start, end)`` of each maximal run of equal values."""
    runs, start = [], 0
    for t in range(1, len(mask) + 1):
        if t == len(mask) or mask[t] != mask[start]:
            runs.append((int(mask[start]), start, t))
            start = t
    return runs


def _sampled(logprob: Any) -> bool:
    """A finite, non-zero log-probability (``None`` and NaN, TRL's "unknown", say nothing)."""
    try:
        value = float(logprob)
    except (TypeError, ValueError):
        return False
    return math.isfinite(value) and value != 0.0


def mask_evidence(masks: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], logprobs: Any, end_of_turn: Collection[int]) -> MaskEvidence:
    """The evidence of one batch (``masks`` already checked 0/1 and as long as their ``completions``)."""
    ends = {int(token) for token in end_of_turn}
    model_ends = environment_ends = model_sampled = environment_sampled = 0
    rows = logprobs if isinstance(logprobs, Sequence) and len(logprobs) == len(masks) else [None] * len(masks)
    for mask, ids, row_logprobs in zip(masks, completions, rows, strict=True):
        mask = [int(m) for m in mask]
        for value, _, end in _runs(mask):
            if int(ids[end - 1]) in ends:
                model_ends += value
                environment_ends += 1 - value
        if isinstance(row_logprobs, Sequence) and len(row_logprobs) == len(mask):
            for m, logprob in zip(mask, row_logprobs, strict=True):
                if _sampled(logprob):
                    model_sampled += m
                    environment_sampled += 1 - m
    return MaskEvidence(model_ends, environment_ends, model_sampled, environment_sampled)
