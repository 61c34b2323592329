"""The numbers: ms-swift's gathered rewards -> groups -> the selected estimator (shapers, transforms) -> one advantage per row.

ms-swift hands its advantage functions the gathered ``rewards_per_func`` ``(N, F)`` and ``reward_weights`` ``(F,)``.
Both replacements combine them as ms-swift does (``nansum(rewards_per_func * weights, dim=1)``: a function that gave
None adds 0, in the rewards' dtype), subtract ``beta * kl_values`` where ms-swift's ``kl_in_reward`` asks for it, and
return ``(advantages, rewards)`` as ms-swift's functions do, so ms-swift logs its own reward metrics unchanged:

- :func:`grouped` (``compute_advantages``): groups of ``num_generations`` consecutive rows;
- :func:`request_aware` (``compute_advantages_dynamic``, ms-swift's multi-turn mode): one unit per request (the last
  row of each ``request_id``, ms-swift's rule), grouped by ``prompt_id`` in order of first appearance, groups of any
  size; every row of a request gets the request's advantage.

The estimator runs once per call through :func:`rllm_plugins.run.run_outcome` on float64 values; ms-swift's
``scale_rewards`` reaches the estimators that name it as a keyword (``trl_grpo``: ``group``, ``batch``, ``none``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from rllm_plugins.options import check_given_options
from rllm_plugins.registry import get_estimator
from rllm_plugins.run import Call, Wording, run_outcome
from rllm_plugins.segments import offsets_from_sizes
from rllm_plugins.shaping.entries import check_shaper_context, resolve_shapers
from rllm_plugins.shaping.stage import Shapers
from rllm_plugins.spec import Estimator
from rllm_plugins.transforms.entries import check_available_context, resolve_transforms, split_chain
from rllm_plugins.transforms.stage import Transforms
from rllm_plugins.trial import trial_run

__all__ = ["ROLE", "Selection", "grouped", "request_aware", "select"]

ROLE = "all_groups"  # ms-swift's groups carry no role
FRAMEWORK = "ms-swift's advantage functions"
WHERE_OPTIONS = "RLLM_SWIFT_ESTIMATOR_KWARGS"  # the setting the estimator's options come from (rllm_swift.use: estimator_kwargs)
TRANSFORM_CONTEXT = {"offsets", "rewards", "scores", "turn_index", "traj_offsets"}  # what the seam gives a transform
SHAPER_CONTEXT = {"offsets", "scores"}  # what the seam gives a shaper: ms-swift hands its advantage functions rewards alone


@dataclass(frozen=True)
class Selection:
    """What the seam runs in place of ms-swift's estimator: resolved and checked once, by :func:`select`.

    ``metrics``: the shapers' and transforms' metrics of the last call (ms-swift's logger does not receive them).
    """

    name: str
    estimator: Estimator
    options: Mapping[str, Any] = field(default_factory=dict)
    transforms: tuple[Any, ...] = ()
    shapers: tuple[Any, ...] = ()
    metrics: dict[str, float] = field(default_factory=dict, compare=False)

    @property
    def who(self) -> str:
        return f"estimator {self.name!r} ({self.estimator.provider}) in ms-swift"

    def describe(self) -> str:
        """One line: the estimator, its options, the shapers and transforms."""
        parts = [f"estimator {self.name!r} ({self.estimator.provider})"]
        if self.options:
            parts.append(f"options {dict(self.options)}")
        if self.shapers:
            parts.append("reward shapers " + ", ".join(s.label or s.name for s in self.shapers))
        if self.transforms:
            parts.append("advantage transforms " + ", ".join(t.label or t.name for t in self.transforms))
        return "; ".join(parts)


def _entries(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) and value.strip().startswith(("[", "{")) else value


def select(
    estimator: str,
    *,
    estimator_kwargs: Mapping[str, Any] | str | None = None,
    transforms: Sequence[Any] | str | None = None,
    shapers: Sequence[Any] | str | None = None,
) -> Selection:
    """The estimator named ``estimator`` (``rloo`` or ``rllm_rloo``), with its keyword options, advantage transforms and
    reward shapers (the forms of ``AlgorithmConfig``; JSON strings too), checked before any training step.

    Refused with ``ValueError``: an unknown name, a step-level estimator (ms-swift hands the functions one reward per
    completion or request, no turns), a stateful one (the functions get no prompt identity in ms-swift's grouped mode
    and ms-swift's checkpoints would not keep the state), a token-level transform, a shaper or transform that needs
    what ms-swift does not hand over (completion lengths).
    """
    name = str(estimator).strip()
    try:
        resolved = get_estimator(name)
    except Exception:
        if not name.startswith("rllm_"):
            raise
        name = name.removeprefix("rllm_")
        resolved = get_estimator(name)
    spec = resolved.spec
    if spec.level != "outcome":
        raise ValueError(
            f"{FRAMEWORK}: estimator {name!r} is step-level; ms-swift hands its advantage functions one reward per completion (or per request in "
            "its multi-turn mode), no turns: choose an outcome-level estimator (rllm-plugins estimators lists each one's level)"
        )
    if spec.stateful:
        raise ValueError(
            f"{FRAMEWORK}: estimator {name!r} keeps a state across steps; ms-swift's grouped mode hands its advantage functions no prompt "
            "identity and its checkpoints would not keep the state: choose a stateless estimator"
        )
    options = _entries(estimator_kwargs) or {}
    if not isinstance(options, Mapping):
        raise ValueError(f"{FRAMEWORK}: estimator keyword options must be a mapping (a JSON object), got {options!r}")
    if "scale_rewards" in options:
        raise ValueError(f"{WHERE_OPTIONS}: scale_rewards is ms-swift's --scale_rewards; set it there (it reaches the estimators that name it)")
    check_given_options(name, resolved, options, where=WHERE_OPTIONS, norm_field="--scale_rewards none")
    trial_run(name, resolved, options, norm_adv_by_std_in_grpo=True, where=WHERE_OPTIONS)
    where_t, where_s = "RLLM_SWIFT_ADVANTAGE_TRANSFORMS", "RLLM_SWIFT_REWARD_SHAPERS"
    chosen = resolve_transforms(_entries(transforms), where_t)
    unit, token = split_chain(chosen)
    if token:
        raise ValueError(
            f"{where_t}: {token[0].name!r} is a token-level transform; ms-swift's advantage functions return one advantage per completion: "
            "choose sequence-level transforms"
        )
    check_available_context(unit, TRANSFORM_CONTEXT, where_t, "ms-swift")
    shaping = resolve_shapers(_entries(shapers), where_s)
    check_shaper_context(shaping, SHAPER_CONTEXT, where_s, "ms-swift")
    return Selection(name, resolved, dict(options), tuple(unit), tuple(shaping))


def _weighted(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor, kl_in_reward: bool, beta: float, kl_values: torch.Tensor | None) -> torch.Tensor:
    """ms-swift's rewards: the weighted nansum over functions, less ``beta * kl_values`` with ``kl_in_reward``."""
    rewards = (rewards_per_func * reward_weights.unsqueeze(0)).nansum(dim=1)
    if kl_in_reward and beta != 0.0 and kl_values is not None:
        rewards = rewards - beta * kl_values
    return rewards


def _scale_setting(selection: Selection, scale_rewards: str) -> dict[str, Any]:
    if scale_rewards == "gdpo":
        raise ValueError(
            f"{selection.who}: scale_rewards='gdpo' normalises each reward function inside ms-swift's own estimator; with an rllm-plugins "
            "estimator set --scale_rewards group, batch or none (it reaches the estimators that name it, such as trl_grpo)"
        )
    return {"scale_rewards": scale_rewards}


def _run(selection: Selection, values: np.ndarray, offsets: np.ndarray, scale_rewards: str, what: str) -> np.ndarray:
    call = Call(selection.estimator, selection.options, selection.who)

    def not_finite(advantages: np.ndarray, _: str) -> str:
        row = int(np.flatnonzero(~np.isfinite(advantages))[0])
        return f"{selection.who} gave a non-finite advantage to {what} {row}; advantages must be finite"

    transforms = Transforms(selection.transforms, "RLLM_SWIFT_ADVANTAGE_TRANSFORMS") if selection.transforms else None
    shapers = Shapers(selection.shapers, "RLLM_SWIFT_REWARD_SHAPERS") if selection.shapers else None
    advantages, commit = run_outcome(
        call,
        values,
        offsets,
        wording=Wording(f"{what}s", not_finite),
        role=ROLE,
        settings=_scale_setting(selection, scale_rewards),
        transforms=transforms,
        shapers=shapers,
    )
    commit()
    selection.metrics.clear()
    for stage in (shapers, transforms):
        if stage is not None:
            selection.metrics.update(stage.metrics)
    return advantages


def _float64(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to("cpu", torch.float64).numpy()


def grouped(
    selection: Selection,
    rewards_per_func: torch.Tensor,
    reward_weights: torch.Tensor,
    num_generations: int,
    advantage_estimator: str = "grpo",
    scale_rewards: str = "group",
    kl_in_reward: bool = False,
    beta: float = 0.0,
    kl_values: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``compute_advantages`` with ``selection``'s estimator: ``(advantages, rewards)``, both ``(N,)`` in the rewards' dtype and device.

    ``advantage_estimator`` (ms-swift's own choice) is not used: the selection replaces it.
    """
    rewards = _weighted(rewards_per_func, reward_weights, kl_in_reward, beta, kl_values)
    rows = rewards.numel()
    if num_generations < 1 or rows % num_generations:
        raise ValueError(f"{selection.who}: {rows} completions do not split into groups of num_generations={num_generations}")
    offsets = np.arange(0, rows + 1, num_generations, dtype=np.int64)
    advantages = _run(selection, _float64(rewards), offsets, scale_rewards, "completion")
    return torch.as_tensor(advantages, dtype=rewards.dtype, device=rewards.device), rewards


def request_aware(
    selection: Selection,
    rewards_per_func: torch.Tensor,
    reward_weights: torch.Tensor,
    prompt_ids: Sequence[str],
    request_ids: Sequence[str],
    advantage_estimator: str = "grpo",
    scale_rewards: str = "group",
    kl_in_reward: bool = False,
    beta: float = 0.0,
    kl_values: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``compute_advantages_dynamic`` with ``selection``'s estimator: one unit per request (its last row), groups by prompt in
    order of first appearance; ``(advantages, rewards)``, both ``(N,)``, each row with its request's advantage."""
    rewards = _weighted(rewards_per_func, reward_weights, kl_in_reward, beta, kl_values)
    rows = rewards.numel()
    if len(prompt_ids) != rows or len(request_ids) != rows:
        raise ValueError(f"{selection.who}: {len(prompt_ids)} prompt ids and {len(request_ids)} request ids for {rows} rows")
    last: dict[Any, int] = {}
    for row, request in enumerate(request_ids):
        last[request] = row
    unique = np.array(sorted(last.values()), dtype=np.int64)  # ms-swift's units: each request's last row, in row order
    group_of: dict[Any, int] = {}
    codes = np.array([group_of.setdefault(prompt_ids[row], len(group_of)) for row in unique.tolist()], dtype=np.int64)
    order = np.argsort(codes, kind="stable")  # units by group, each group in row order
    values = _float64(rewards)[unique][order]
    offsets = offsets_from_sizes(np.bincount(codes, minlength=len(group_of)))
    per_unit = np.empty(unique.size, dtype=np.float64)
    per_unit[order] = _run(selection, values, offsets, scale_rewards, "request")
    unit_of_request = {request_ids[row]: u for u, row in enumerate(unique.tolist())}
    advantages = per_unit[[unit_of_request[request] for request in request_ids]]
    return torch.as_tensor(advantages, dtype=rewards.dtype, device=rewards.device), rewards
