"""verl's advantage-estimator calling convention around an rLLM batched estimator.

verl calls a registered estimator with keyword arguments only: ``token_level_rewards`` (B, T),
``response_mask`` (B, T), ``index`` (B,) object array of ``uid`` strings (absent when the batch
has no ``uid``), ``config`` (the ``algorithm`` section, an OmegaConf ``DictConfig`` in struct mode)
and optional extras such as ``reward_baselines``. It returns ``(advantages, returns)``, both (B, T).

Options read from ``config`` (all optional):

- ``norm_adv_by_std_in_grpo`` (bool, verl's own key; without it, the argument of verl's ``compute_advantage`` or of the
  registered function, as verl's ``grpo`` takes it; default True);
- ``rllm_estimator_kwargs`` (mapping): keyword arguments of the estimator, e.g. ``epsilon``.
  Set on verl's command line with ``+algorithm.rllm_estimator_kwargs.epsilon=1e-4``;
- ``gdpo_reward_keys``, ``gdpo_reward_weights``, ``rllm_multi_objective_aggregation``: several
  reward keys per row (see :mod:`.multi_objective`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from rllm_plugins.aggregation import aggregate_advantages
from rllm_plugins.options import check_estimator_kwargs
from rllm_plugins.registry import Estimator, get_estimator
from rllm_plugins.run import Call, Wording, run_outcome
from rllm_plugins.segments import offsets_from_sizes
from rllm_plugins.steps.anchors import is_hashable
from rllm_verl.compute.multi_objective import reward_key_options, reward_table
from rllm_verl.compute.order import scan_order
from rllm_verl.compute.state import VERL_ROLE, verl_estimator_state
from rllm_verl.compute.steps import Episodes, StepSources, compute_rllm_step_advantage, step_sources
from rllm_verl.compute.tokens import check_has_tokens, mask_lengths, reward_sums, rows_with_tokens, write_advantages
from rllm_verl.context import algorithm_value, current_keys, current_non_tensor_batch, current_tensor, verl_arguments

__all__ = [
    "ESTIMATOR_KWARGS_KEY",
    "check_inputs",
    "check_representable",
    "compute_rllm_advantage",
    "estimator_options",
    "group_rows",
    "in_row_order",
    "model_rows",
    "placed",
    "output_dtype",
    "verl_estimator",
]

ESTIMATOR_KWARGS_KEY = "rllm_estimator_kwargs"


def group_rows(index: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """Group rows by equal ``index`` values (``==`` and hash, as a dict does: ``"1"`` and ``"01"`` differ).

    Returns ``(order, offsets)``: ``order`` (B,) int64 puts each group's rows next to each other,
    stable, groups in order of first appearance (None when rows already are contiguous per group);
    ``offsets`` (G + 1,) int64 are the group boundaries in that order.
    """
    n = len(index)
    if n == 0:
        return None, np.zeros(1, dtype=np.int64)
    starts = np.flatnonzero(np.not_equal(index[1:], index[:-1])) + 1
    heads = index[np.concatenate(([0], starts))].tolist()
    if len(set(heads)) == len(heads):  # every uid forms a single run: no reordering needed
        offsets = np.concatenate(([0], starts, [n])).astype(np.int64)
        _refuse_nan(heads, offsets, None)
        return None, offsets
    keys = index.tolist()
    code_of = {key: code for code, key in enumerate(dict.fromkeys(keys))}
    group_of_row = np.fromiter(map(code_of.__getitem__, keys), dtype=np.int64, count=n)
    order = np.argsort(group_of_row, kind="stable")
    offsets = offsets_from_sizes(np.bincount(group_of_row, minlength=len(code_of)))
    _refuse_nan(list(code_of), offsets, order)
    return order, offsets


def _refuse_nan(keys: list[object], offsets: np.ndarray, order: np.ndarray | None) -> None:
    """Refuse a NaN uid: it equals no uid, itself included, so its rows would be groups of one (or grouped by identity).

    Contiguous runs (``order`` None) hold a NaN only in runs of one row, so only those are looked at.
    """
    groups = range(len(keys)) if order is not None else np.flatnonzero(np.diff(offsets) == 1).tolist()
    for g in groups:
        if keys[g] != keys[g]:
            row = int(offsets[g] if order is None else order[offsets[g]])
            raise ValueError(f"row {row} has uid {keys[g]!r}, which equals no other id (NaN); give every row a real uid")


def in_row_order(grouped: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    """``grouped`` (B,), in the group order of :func:`group_rows`, back in row order (the inverse of ``values[order]``)."""
    if order is None:
        return grouped
    out = np.empty_like(grouped)
    out[order] = grouped
    return out


def estimator_options(config: Any, where: str, selected: Mapping[str, Estimator] | None = None) -> dict[str, Any]:
    """Keyword options of the estimator from verl's ``algorithm`` config (None, DictConfig, AlgoConfig or dict) and the
    arguments of the current call (:func:`rllm_verl.context.algorithm_value`).

    With ``selected`` (``{registry name: resolved estimator}``), the ``rllm_estimator_kwargs`` are checked
    against that estimator's options (:func:`rllm_plugins.options.check_estimator_kwargs`).
    """
    norm, _ = algorithm_value("norm_adv_by_std_in_grpo", config)
    norm = True if norm is None else norm
    raw = None if config is None else config.get(ESTIMATOR_KWARGS_KEY, None)
    if raw is None:
        extra: dict[str, Any] = {}
    elif isinstance(raw, Mapping) or hasattr(raw, "items"):
        try:
            from omegaconf import OmegaConf

            extra = OmegaConf.to_container(raw, resolve=True) if OmegaConf.is_config(raw) else dict(raw)  # type: ignore[assignment]
        except ImportError:  # pragma: no cover - verl depends on omegaconf
            extra = dict(raw)
    else:
        raise ValueError(f"{where}: algorithm.{ESTIMATOR_KWARGS_KEY} must be a mapping of keyword arguments, got {type(raw).__name__} {raw!r}")
    if "norm_adv_by_std_in_grpo" in extra:
        raise ValueError(f"{where}: set algorithm.norm_adv_by_std_in_grpo, not algorithm.{ESTIMATOR_KWARGS_KEY}.norm_adv_by_std_in_grpo")
    if not isinstance(norm, (bool, np.bool_)):
        raise ValueError(f"{where}: algorithm.norm_adv_by_std_in_grpo must be a bool, got {type(norm).__name__} {norm!r}")
    if selected is not None:
        check_estimator_kwargs(selected, extra, where=f"{where}: algorithm.{ESTIMATOR_KWARGS_KEY}", norm_field="algorithm.norm_adv_by_std_in_grpo")
    return {**{str(k): v for k, v in extra.items()}, "norm_adv_by_std_in_grpo": bool(norm)}


_HALF = (torch.float16, torch.bfloat16)


def output_dtype(token_level_rewards: torch.Tensor) -> torch.dtype:
    """The dtype advantages are written in: the rewards' float dtype, the default float dtype for integer (or bool) rewards."""
    return token_level_rewards.dtype if token_level_rewards.is_floating_point() else torch.get_default_dtype()


def check_representable(advantages: np.ndarray, dtype: torch.dtype, where: str, index: Any, id_name: str = "uid") -> None:
    """Refuse finite advantages (B,) float64 past the range of the float ``dtype`` they are written in (they would become inf).

    One rule for every float dtype (fp16, bf16, float32); ``index[row]`` names the row (its ``id_name``). Costs one
    max and one min over B in the common case.
    """
    if dtype == torch.float64 or advantages.size == 0:
        return
    limit = float(torch.finfo(dtype).max)
    if -limit <= float(advantages.min()) and float(advantages.max()) <= limit:
        return
    row = int(np.flatnonzero(np.abs(advantages) > limit)[0])
    wider = "float32" if dtype in _HALF else "float64"
    raise ValueError(
        f"{where}: advantage {advantages[row]} of row {row} ({id_name} {index[row]!r}) overflows {dtype} (largest {limit:g}), the dtype of "
        f"token_level_rewards; compute rewards in {wider}, or scale them down"
    )


def model_rows(has_tokens: np.ndarray, order: np.ndarray | None, offsets: np.ndarray) -> np.ndarray | None:
    """``(R,)`` int64 rows of the groups with at least one model token, or None when every group has one (the usual case).

    ``has_tokens`` ``(B,)`` bool per row; ``order``, ``offsets`` as :func:`group_rows` gives them. A group none of whose rows
    has a model token (verl v1's ``_balance_batch`` padding: ``response_mask`` all 0, uid ``pad...``) is no sample: the
    outcome path leaves it out of every statistic (role and batch ones included) and gives it advantage 0. A row without
    tokens in a group with others stays a sample with its reward, as verl's own estimators count it.
    """
    if has_tokens.all():
        return None
    group_of_row = np.empty(has_tokens.size, dtype=np.int64)
    group_of_row[slice(None) if order is None else order] = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
    keep = (np.bincount(group_of_row, weights=has_tokens, minlength=offsets.size - 1) > 0)[group_of_row]
    return None if keep.all() else np.flatnonzero(keep)


def placed(values: np.ndarray, rows: np.ndarray, size: int) -> np.ndarray:
    """``(size,)`` float64: ``values`` ``(R,)`` at ``rows``, 0 elsewhere."""
    out = np.zeros(size)
    out[rows] = values
    return out


def check_inputs(where: str, token_level_rewards: Any, response_mask: Any, index: Any) -> None:
    """Raise ``ValueError`` unless rewards and mask are matching 2-D (B, T) tensors and ``index`` has B ids (reads no token)."""
    if not isinstance(token_level_rewards, torch.Tensor) or token_level_rewards.dim() != 2:
        shape = tuple(token_level_rewards.shape) if hasattr(token_level_rewards, "shape") else type(token_level_rewards).__name__
        raise ValueError(f"{where}: token_level_rewards must be a 2-D (batch, response_length) tensor, got {shape}")
    if not isinstance(response_mask, torch.Tensor) or tuple(response_mask.shape) != tuple(token_level_rewards.shape):
        shape = tuple(response_mask.shape) if hasattr(response_mask, "shape") else type(response_mask).__name__
        raise ValueError(f"{where}: response_mask has shape {shape}, token_level_rewards has {tuple(token_level_rewards.shape)}; they must match")
    if index is None:
        raise ValueError(
            f"{where}: no `index` was given. rLLM estimators compare the responses of one prompt (GRPO-style), so the batch "
            "needs data.non_tensor_batch['uid'] (one id per prompt, repeated for each of its responses), as verl's trainer sets it."
        )
    if len(index) != token_level_rewards.shape[0]:
        raise ValueError(f"{where}: index (uid) has {len(index)} entries for {token_level_rewards.shape[0]} rows")


def compute_rllm_advantage(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None,
    config: Any = None,
    non_tensor_batch: dict[str, Any] | None = None,
    responses: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages of the rLLM estimator ``name`` for a verl batch (a step-level one: :mod:`.step_bridge`).

    Rows are grouped by ``index`` (B,); the reward of row b is ``token_level_rewards[b].sum()``, or,
    with ``algorithm.gdpo_reward_keys``, its scores under those keys of ``non_tensor_batch`` (given, or
    the batch verl's ``compute_advantage`` is processing), aggregated as :mod:`.multi_objective` says;
    the estimator runs in float64 and row b gets ``advantage[b] * response_mask[b]``; a group without model
    tokens (verl's padding) is in no statistic and gets 0 (:func:`model_rows`). Returns the
    same (B, T) tensor twice (advantages and returns, as verl's outcome estimators do), in the dtype
    of ``token_level_rewards`` (the default float dtype for integer rewards) and on its device. ``values`` (B, T): the
    critic's, for a value-based estimator (else those of the batch verl's ``compute_advantage`` is processing).
    """
    where = f"advantage estimator 'rllm_{name}'"
    check_inputs(where, token_level_rewards, response_mask, index)
    estimator = get_estimator(name)  # resolved once: every check and call below uses it
    options = estimator_options(config, where, {name: estimator})
    index = np.asarray(index, dtype=object) if not isinstance(index, np.ndarray) else index
    if index.ndim != 1:
        raise ValueError(
            f"{where}: index (uid) has shape {index.shape}; it needs one id per row (1-D). Tuples stored in a numpy array "
            "become rows of a 2-D array: join multi-part ids into one string, e.g. f'{task}|{sample}'"
        )
    dtype = output_dtype(token_level_rewards)
    keyed = reward_key_options(config, where)
    if keyed is not None and estimator.spec.level == "step":
        raise ValueError(
            f"{where} is step-level: it reads per-turn rewards from token_level_rewards, so algorithm.gdpo_reward_keys "
            "(one score per row and key) cannot apply; remove gdpo_reward_keys or choose an outcome-level rllm_* estimator"
        )
    with torch.no_grad():
        try:
            order, offsets = group_rows(index)
        except ValueError as error:  # a NaN uid
            raise ValueError(f"{where}: {error}") from None
        except TypeError:  # an unhashable uid: name the first
            row = next(r for r, uid in enumerate(index.tolist()) if not is_hashable(uid))
            raise ValueError(f"{where}: row {row} has uid {index[row]!r}, a {type(index[row]).__name__}; a uid must be hashable (a str or an int)") from None
        call = Call(estimator, options, f"{where}: the estimator ({estimator.provider})")
        needs = call.needs
        if estimator.spec.level == "step":
            responses = responses if responses is not None else current_tensor(index, "responses")
            batch = non_tensor_batch if non_tensor_batch is not None else current_non_tensor_batch(index)
            sources = step_sources(index, token_level_rewards.shape[-1], where, responses, batch) if needs.anchors else StepSources()
            keys = current_keys(index, where) if needs.state else None
            if keys is not None:  # v1: a running baseline (a composite's stateful term) scans in an order balancing cannot change
                order, offsets = scan_order(index, keys, where)
            episodes = Episodes.one_row_each(order, offsets, index.size)
            if needs.values and values is None:  # the critic's (B, T), as verl's gae takes them
                values = current_tensor(index, "values")
            return compute_rllm_step_advantage(name, call, where, token_level_rewards, response_mask, index, episodes, config, dtype, sources, values)
        has_tokens = rows_with_tokens(response_mask)  # the step level knows its rows' turns instead
        check_has_tokens(where, has_tokens)
        if keyed is None:  # step level reads the rewards per turn instead
            scores = reward_sums(token_level_rewards)
            if not np.isfinite(scores).all():
                row = int(np.flatnonzero(~np.isfinite(scores))[0])
                raise ValueError(f"{where}: row {row} (uid {index[row]!r}) has reward {scores[row]}; token_level_rewards must be finite")
        else:
            scores = reward_table(non_tensor_batch, keyed.keys, index, where)
        rows = model_rows(has_tokens, order, offsets)
        if rows is not None:  # groups without model tokens (verl's v1 padding): in no statistic, advantage 0
            scores = scores[rows]
            order, offsets = group_rows(index[rows])
        keys = current_keys(index, where) if needs.state else None
        if keys is not None:  # v1: a running baseline scans the rows in an order verl's balancing cannot change
            kept = np.arange(index.size) if rows is None else rows
            order, offsets = scan_order(index[kept], [keys[r] for r in kept.tolist()], where)
        lengths = None
        if needs.lengths:
            lengths = mask_lengths(response_mask) if rows is None else mask_lengths(response_mask)[rows]
            lengths = lengths if order is None else lengths[order]
        values = scores if order is None else scores[order]
        live, combine = None, None
        if needs.state:  # the scan order: v1 by uid and session (above), legacy the rows' (groups by first appearance); padding left out
            if keyed is not None:
                raise ValueError(f"{where} is stateful (a running baseline over one reward per row): remove algorithm.gdpo_reward_keys")
            live = has_tokens if rows is None else has_tokens[rows]  # a row without model tokens never touches the state
            live = live if order is None else live[order]
        elif keyed is not None:
            combine = functools.partial(_combined, aggregation=keyed.aggregation, weights=keyed.weights, names=keyed.keys, where=where)

        def placed_in_rows(grouped: np.ndarray) -> np.ndarray:
            advantages = in_row_order(grouped, order)
            return advantages if rows is None else placed(advantages, rows, index.size)

        def not_finite(grouped: np.ndarray, _: str) -> str:
            advantages = placed_in_rows(grouped)
            row = int(np.flatnonzero(~np.isfinite(advantages))[0])
            return f"{call.who} gave advantage {advantages[row]} for row {row} (uid {index[row]!r})"

        wording = Wording("rows with model tokens" if live is not None else "rows", not_finite)
        state = verl_estimator_state() if needs.state else None
        grouped, commit = run_outcome(call, values, offsets, wording=wording, role=VERL_ROLE, state=state, lengths=lengths, live=live, combine=combine)
        advantages = placed_in_rows(grouped)
        check_representable(advantages, dtype, where, index)
        commit()  # every check passed
        out = write_advantages(advantages, response_mask.to(token_level_rewards.device), dtype)
    return out, out


def _combined(form: Any, values: np.ndarray, offsets: np.ndarray, /, **kwargs: Any) -> np.ndarray:
    """Several reward keys per row combined around the estimator's batched ``form`` (:mod:`.multi_objective`)."""
    return aggregate_advantages(values, offsets, form, **kwargs)


def verl_estimator(name: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The function registered in verl as ``rllm_<name>``; it looks ``name`` up in our registry at each call."""

    def compute(
        *,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: np.ndarray | None = None,
        config: Any = None,
        non_tensor_batch: dict[str, Any] | None = None,
        responses: torch.Tensor | None = None,
        values: torch.Tensor | None = None,
        **given: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        with verl_arguments(given):  # gamma, lam, norm_adv_by_std_in_grpo, as verl's own gae and grpo take them
            return compute_rllm_advantage(name, token_level_rewards, response_mask, index, config, non_tensor_batch, responses, values)

    compute.__name__ = compute.__qualname__ = f"compute_rllm_{name}_advantage"
    compute.__doc__ = f"rLLM estimator {name!r} in verl's calling convention (see rllm_verl.compute.outcome.compute_rllm_advantage)."
    compute.rllm_estimator = name  # type: ignore[attr-defined]
    return compute
