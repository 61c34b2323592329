"""Reward shapers on verl's batches, for any ``adv_estimator`` (verl's own included), legacy and v1.

``algorithm.rllm_reward_shapers`` (``+algorithm.rllm_reward_shapers='[{name: dapo_overlong, max_length: 1024, buffer: 256}]'``)
lists the shapers (:mod:`rllm_plugins.shaping`). A unit is a row, or a session of a v1 agent loop (one trajectory, however
many outputs), grouped by ``uid``; its reward is its final row's summed ``token_level_rewards``. What a shaper may read:

- ``lengths``: the unit's model tokens (``response_mask`` summed over its rows);
- ``input_lengths``: its first row's prompt tokens (legacy: ``attention_mask`` over the prompt columns; v1: the row's
  ``prompts`` as TransferQueue holds them);
- ``tool_lengths``: the tokens inside its responses that the model did not write (legacy: ``attention_mask`` over the
  response columns, v1: the row's ``responses``, minus ``response_mask``: tool and environment replies of an agent loop);
- ``turns``: its runs of model tokens (a turn of an agent loop is one run of 1s in ``response_mask``), over all its rows;
- ``scores``: its final row's summed ``token_level_scores`` (the task's score before verl's KL penalty), where the batch has it.

For ``rllm_*`` estimators the terms are added inside the run (:func:`rllm_plugins.run.run_outcome`, at the step level to each
trajectory's last turn); for verl's own ones, :func:`own_shaping` adds each unit's terms to its final row's last model
token of ``token_level_rewards`` (where verl's reward managers put a response's reward) for the length of verl's call, and
puts the unshaped tensor back after it: verl's ``critic/rewards`` and ``critic/score`` metrics stay the raw rewards, the
terms go to ``rllm/shaping/...``.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from rllm_plugins.layout import Layout
from rllm_plugins.shaper_spec import shaper_context
from rllm_plugins.shaping import SelectedShaper, check_shaper_context, resolve_shapers
from rllm_plugins.shaping.registry import registry_version
from rllm_plugins.shaping.stage import Shapers
from rllm_verl.compute.rows import group_rows
from rllm_verl.compute.sessions import Sessions, session_layout
from rllm_verl.compute.state import VERL_ROLE
from rllm_verl.compute.tokens import mask_lengths, reward_sums
from rllm_verl.compute.transforms import SCORES_KEY, current_scores
from rllm_verl.context import current_tensor, fetch_rows, publish_metrics

__all__ = ["CONFIG_KEY", "WHERE", "VERL_CONTEXT", "own_shaping", "shapers_of", "turn_counts", "unit_shapers"]

CONFIG_KEY = "rllm_reward_shapers"  # +algorithm.rllm_reward_shapers=[...]
WHERE = f"algorithm.{CONFIG_KEY}"
VERL_CONTEXT = {"offsets", "scores", "lengths", "input_lengths", "tool_lengths", "turns"}
"""What verl's batches give a shaper (``input_lengths``, ``tool_lengths`` and ``scores`` where the batch has the tensors)."""

UNSHAPED_INPUTS = {
    "gdpo": "computes from each reward key's scores in non_tensor_batch, which the shapers do not change",
    "remax": "subtracts reward_baselines (the greedy responses' rewards, which no shaper saw) from the shaped rewards",
}
"""verl's own estimators whose numbers would not follow ``token_level_rewards`` shaped alone: refused with shapers."""

_resolved: dict[tuple[str, tuple[int, int]], tuple[SelectedShaper, ...]] = {}
_inside: contextvars.ContextVar[bool] = contextvars.ContextVar("rllm_verl_shaping_inside", default=False)


def shapers_of(config: Any) -> tuple[SelectedShaper, ...]:
    """The shapers ``config`` (verl's ``algorithm`` section) selects, resolved and checked (once per distinct list, while the
    registry is unchanged)."""
    if config is None:
        return ()
    entries = config.get(CONFIG_KEY) if isinstance(config, Mapping) or hasattr(config, "get") else getattr(config, CONFIG_KEY, None)
    if hasattr(entries, "_get_node") or type(entries).__name__ in ("DictConfig", "ListConfig"):
        from omegaconf import OmegaConf

        entries = OmegaConf.to_container(entries, resolve=True)
    if not entries:
        return ()
    key = (repr(entries), registry_version())
    if key not in _resolved:
        selected = resolve_shapers(entries, WHERE)
        check_shaper_context(selected, VERL_CONTEXT, WHERE, "verl")
        _resolved[key] = selected
    return _resolved[key]


def _named(selected: tuple[SelectedShaper, ...]) -> set[str]:
    return {key for choice in selected for key in (*shaper_context(choice.shaper.spec), *choice.shaper.spec.requires)}


def turn_counts(mask: torch.Tensor) -> np.ndarray:
    """``(B,)`` float64: each row's runs of model tokens (``mask`` (B, T) 0/1): its first column plus its rises from 0 to 1."""
    ones = mask != 0
    rises = (ones[:, 1:] & ~ones[:, :-1]).sum(dim=-1) if ones.shape[1] > 1 else torch.zeros(ones.shape[0], dtype=torch.int64)
    return (rises + ones[:, 0].to(rises.dtype)).to("cpu", torch.float64).numpy() if ones.shape[1] else np.zeros(ones.shape[0])


def _context(
    selected: tuple[SelectedShaper, ...], index: Any, response_mask: torch.Tensor, layout: Layout, turns: np.ndarray | None, data: Any = None
) -> dict[str, Any]:
    """Each unit's context of :data:`VERL_CONTEXT` that a shaper of ``selected`` names (see the module docstring); ``data``: the
    DataProto itself, where the caller holds it (else the one verl's call is processing)."""
    named = _named(selected)
    context: dict[str, Any] = {"lengths": layout.per_unit(mask_lengths(response_mask))}
    if "turns" in named:
        context["turns"] = layout.per_unit(turn_counts(response_mask) if turns is None else turns)
    if named & {"input_lengths", "tool_lengths"}:
        read = _read_tokens(index, response_mask, data)
        if read is not None:
            prompt, response = read
            if "input_lengths" in named:
                context["input_lengths"] = prompt[layout.rows[layout.row_offsets[:-1]]]
            if "tool_lengths" in named:
                context["tool_lengths"] = layout.per_unit(response - mask_lengths(response_mask))
    if "scores" in named:
        scores = current_scores(index)
        context["scores"] = None if scores is None else scores[layout.final_rows]
    return context


def _read_tokens(index: Any, response_mask: torch.Tensor, data: Any = None) -> tuple[np.ndarray, np.ndarray] | None:
    """``(B,)`` prompt tokens and ``(B,)`` response tokens (model's and tools') of each row, or None where the batch has neither
    an ``attention_mask`` (legacy) nor rows served by TransferQueue (v1)."""
    tensors = getattr(data, "batch", None)
    attention = tensors["attention_mask"] if tensors is not None and "attention_mask" in tensors.keys() else current_tensor(index, "attention_mask")  # noqa: SIM118
    width = response_mask.shape[1]
    if attention is not None and attention.dim() == 2 and attention.shape[1] >= width:
        return reward_sums(attention[:, : attention.shape[1] - width]), reward_sums(attention[:, attention.shape[1] - width :])
    rows = fetch_rows(index, WHERE) if index is not None else None
    if rows is None:
        return None
    return np.array([len(p) for p in rows.prompts], dtype=np.float64), np.array([len(r) for r in rows.responses], dtype=np.float64)


def unit_shapers(config: Any, index: Any, response_mask: torch.Tensor, layout: Layout, turns: np.ndarray | None = None) -> Shapers | None:
    """``config``'s shapers as an ``rllm_*`` estimator's run applies them to ``layout``'s units (None when there are none).
    ``turns`` ``(B,)``: each row's turns where the caller found them already."""
    selected = shapers_of(config)
    if not selected:
        return None
    if config is not None and config.get("gdpo_reward_keys", None):
        raise ValueError(
            f"{WHERE}: reward shapers add to one reward per row or session, and algorithm.gdpo_reward_keys gives each several (one per "
            f"key, combined around the estimator); remove {WHERE} or algorithm.gdpo_reward_keys"
        )
    return Shapers(selected, WHERE, _context(selected, index, response_mask, layout, turns))


def _units(data: Any, sessions: Sessions | None, live: np.ndarray) -> Layout:
    """The units verl's own estimator compares: each session (v1, several outputs), else each row; grouped by uid. A group
    without a model token (verl's padding) is in none; a row without one in a group with others stays a unit, as verl's
    estimator counts it."""
    if sessions is not None and not sessions.one_output_each:
        layout = session_layout(sessions, None, WHERE)
    else:
        uids = np.asarray(data.non_tensor_batch["uid"], dtype=object) if "uid" in data.non_tensor_batch else np.arange(live.size)
        try:
            order, offsets = group_rows(uids)
        except (ValueError, TypeError) as error:
            raise ValueError(f"{WHERE}: {error}") from None
        layout = Layout.one_row_each(order, offsets, uids.size)
    return layout.keeping_live_groups(layout.per_unit(live.astype(np.float64)) > 0)


@contextlib.contextmanager
def own_shaping(data: Any, config: Any, sessions: Sessions | None = None, estimator: Any = None) -> Iterator[None]:
    """For the block (verl's own ``estimator``'s call), ``data.batch["token_level_rewards"]`` with each unit's terms at its final
    row's last model token; the unshaped tensor is back after it, and the terms' metrics in the step's logs. Inside another
    such block (v1's function calling the legacy one on a sub-batch) it does nothing: the batch is shaped once. An estimator
    of :data:`UNSHAPED_INPUTS` is refused."""
    selected = shapers_of(config)
    if not selected or _inside.get():
        yield
        return
    name = str(getattr(estimator, "value", estimator))
    if name in UNSHAPED_INPUTS:
        raise ValueError(
            f"{WHERE}: verl's own {name!r} {UNSHAPED_INPUTS[name]}, so its advantages would not follow the shaped rewards; remove "
            f"{WHERE}, or choose an estimator that reads token_level_rewards alone (verl's grpo, rloo, ..., or an rllm_* name)"
        )
    batch = data.batch
    rewards, mask = batch["token_level_rewards"], batch["response_mask"]
    index = data.non_tensor_batch.get("uid")
    live = mask_lengths(mask) > 0
    layout = _units(data, sessions, live)
    shapers = Shapers(selected, WHERE, _context(selected, index, mask, layout, None, data))
    if SCORES_KEY not in batch.keys():  # noqa: SIM118 - a TensorDict: no task scores, the rewards are the scores
        shapers.context = {k: v for k, v in shapers.context.items() if k != "scores"}
    raw = reward_sums(rewards)[layout.final_rows]
    delta = shapers.shape(raw, layout.unit_offsets, VERL_ROLE) - raw
    last = mask.shape[1] - 1 - torch.flip((mask != 0).to(torch.int8), dims=[1]).argmax(dim=1).cpu().numpy()  # each row's last model token
    # 16-bit rewards in float32 for the call: bf16 would round 10 - 0.02 back to 10 (the term lost); integers too
    shaped = rewards.to(torch.float32) if rewards.dtype in (torch.float16, torch.bfloat16) or not rewards.is_floating_point() else rewards.clone()
    rows = torch.as_tensor(layout.final_rows, dtype=torch.long)
    shaped[rows, torch.as_tensor(last[layout.final_rows], dtype=torch.long)] += torch.as_tensor(delta, dtype=shaped.dtype).to(shaped.device)
    batch["token_level_rewards"] = shaped
    token = _inside.set(True)
    try:
        yield
    finally:
        _inside.reset(token)
        batch["token_level_rewards"] = rewards
    publish_metrics(data, {f"rllm/{key}": value for key, value in shapers.metrics.items()})
