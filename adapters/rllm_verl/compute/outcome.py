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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from rllm_plugins.aggregation import aggregate_advantages
from rllm_plugins.layout import Layout
from rllm_plugins.options import check_estimator_kwargs
from rllm_plugins.provenance import provenance, provenance_line
from rllm_plugins.registry import Estimator, get_estimator
from rllm_plugins.run import Call, Wording, run_outcome
from rllm_plugins.steps.anchors import is_hashable
from rllm_verl.compute.multi_objective import reward_key_options, reward_table
from rllm_verl.compute.order import scan_order
from rllm_verl.compute.rows import group_rows
from rllm_verl.compute.sessions import Sessions, session_layout
from rllm_verl.compute.shaping import shapers_of, unit_shapers
from rllm_verl.compute.state import VERL_ROLE, verl_estimator_state
from rllm_verl.compute.steps import StepSources, compute_rllm_step_advantage, step_sources
from rllm_verl.compute.tokens import check_has_tokens, mask_lengths, reward_sums, rows_with_tokens, write_advantages
from rllm_verl.compute.transforms import check_token_part, current_scores, names_context, transforms_of, unit_transforms
from rllm_verl.context import algorithm_value, announce_provenance, current_keys, current_non_tensor_batch, current_tensor, publish_current, verl_arguments

__all__ = [
    "ESTIMATOR_KWARGS_KEY",
    "check_inputs",
    "check_representable",
    "compute_rllm_advantage",
    "estimator_options",
    "output_dtype",
    "verl_estimator",
    "verl_provenance",
]

ESTIMATOR_KWARGS_KEY = "rllm_estimator_kwargs"


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


def verl_provenance(estimator: Estimator, options: Mapping[str, Any], config: Any) -> dict[str, Any]:
    """Which code an ``rllm_*`` estimator's advantages come from (:func:`rllm_plugins.provenance.provenance`): ``estimator``
    under verl's one role, its ``options`` (:func:`estimator_options`) and ``algorithm.rllm_advantage_transforms`` of ``config``;
    the record each advantage step prints as one line, and ``verl-check`` and ``verl-rehearse`` report; with
    ``algorithm.rllm_reward_shapers``, the shapers."""
    return provenance({VERL_ROLE: estimator}, transforms_of(config), options, shapers_of(config))


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
    *,
    sessions: Sessions | None = None,
    keys: Sequence[str] | None = None,
    prompts: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages of the rLLM estimator ``name`` for a verl batch (a step-level one: :mod:`.steps`).

    The units are the rows, or with ``sessions`` (v1's multi-output sessions) the sessions, each one trajectory whose
    outputs are its rows: one walk for both. Units are grouped by ``index`` (B,) (a session by its rows' uid); a unit's
    reward is its final row's ``token_level_rewards.sum()``, or, with ``algorithm.gdpo_reward_keys``, that row's scores
    under those keys of ``non_tensor_batch`` (given, or the batch verl's ``compute_advantage`` is processing),
    aggregated as :mod:`.multi_objective` says; a unit's length is its rows' model tokens. The estimator runs in float64,
    then the unit part of ``algorithm.rllm_advantage_transforms`` (:mod:`.transforms`) on its units, and row b gets its
    unit's ``advantage * response_mask[b]``; a group without model tokens (verl's padding) is in no statistic and in no
    transform, and gets 0 (:meth:`rllm_plugins.layout.Layout.keeping_live_groups`). Returns the same (B, T) tensor twice (advantages and returns, as
    verl's outcome estimators do), in the dtype of ``token_level_rewards`` (the default float dtype for integer
    rewards) and on its device. ``values`` (B, T): the critic's, for a value-based estimator (else those of the batch
    verl's ``compute_advantage`` is processing). ``keys``: the rows' TransferQueue keys (else the current v1 batch's),
    the scan order of a stateful estimator; ``prompts``: the rows' prompt ids, anchoring a session output's first turn.
    """
    where = f"advantage estimator 'rllm_{name}'" + ("" if sessions is None else " (sessions of compute_advantage_for_multi_trajectories)")
    check_inputs(where, token_level_rewards, response_mask, index)
    estimator = get_estimator(name)  # resolved once: every check and call below uses it
    options = estimator_options(config, where, {name: estimator})
    announce_provenance(provenance_line(verl_provenance(estimator, options, config)))  # once per run, and when it changes
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
        call = Call(estimator, options, f"{where}: the estimator ({estimator.provider})")
        needs = call.needs
        if keys is None and needs.state:
            keys = current_keys(index, where)  # v1: a running baseline scans the units in an order verl's balancing cannot change
        if sessions is None:
            layout = Layout.one_row_each(*_grouped(index, where), index.size)
        else:
            scan_keys = [str(keys[row]) for row in sessions.final_rows.tolist()] if keys is not None and needs.state else None
            layout = session_layout(sessions, scan_keys, where)
        if estimator.spec.level == "step":
            responses = responses if responses is not None else current_tensor(index, "responses")
            batch = non_tensor_batch if non_tensor_batch is not None else current_non_tensor_batch(index)
            length = token_level_rewards.shape[-1]
            sources = step_sources(index, length, where, responses, batch, prompts) if needs.anchors else StepSources()
            values = values if values is not None or not needs.values else current_tensor(index, "values")
            return compute_rllm_step_advantage(name, call, where, token_level_rewards, response_mask, index, layout, config, dtype, sources, values)
        return _outcome(call, where, layout, token_level_rewards, response_mask, index, config, non_tensor_batch, keyed, dtype, keys, sessions is not None)


def _grouped(index: np.ndarray, where: str) -> tuple[np.ndarray | None, np.ndarray]:
    """:func:`.rows.group_rows` of ``index``, its errors naming ``where`` (a NaN uid) and the first unhashable uid's row."""
    try:
        return group_rows(index)
    except ValueError as error:  # a NaN uid
        raise ValueError(f"{where}: {error}") from None
    except TypeError:  # an unhashable uid: name the first
        row = next(r for r, uid in enumerate(index.tolist()) if not is_hashable(uid))
        raise ValueError(f"{where}: row {row} has uid {index[row]!r}, a {type(index[row]).__name__}; a uid must be hashable (a str or an int)") from None


def _outcome(
    call: Call,
    where: str,
    layout: Layout,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any,
    non_tensor_batch: dict[str, Any] | None,
    keyed: Any,
    dtype: torch.dtype,
    keys: Sequence[str] | None,
    by_session: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The outcome level of :func:`compute_rllm_advantage` over ``layout``'s units: rewards → estimator → transforms → rows."""
    needs = call.needs
    has_tokens = rows_with_tokens(response_mask)  # the step level knows its rows' turns instead
    check_has_tokens(where, has_tokens)
    if keyed is None:  # step level reads the rewards per turn instead
        scores = reward_sums(token_level_rewards)
        if not np.isfinite(scores).all():
            row = int(np.flatnonzero(~np.isfinite(scores))[0])
            raise ValueError(f"{where}: row {row} (uid {index[row]!r}) has reward {scores[row]}; token_level_rewards must be finite")
    else:
        scores = reward_table(non_tensor_batch, keyed.keys, index, where)
    unit_has = layout.per_unit(has_tokens) > 0
    if not unit_has.all():  # groups without model tokens (verl's v1 padding): in no statistic and no transform, advantage 0
        layout = layout.keeping_live_groups(unit_has)
        unit_has = layout.per_unit(has_tokens) > 0
    if keys is not None and needs.state:  # v1: a running baseline's scan order, by uid, session and output
        order, offsets = scan_order(index[layout.final_rows], [str(keys[r]) for r in layout.final_rows.tolist()], where, layout.final_rows)
        layout = layout.reordered(order, offsets)
        unit_has = layout.per_unit(has_tokens) > 0
    transforms = unit_transforms(config)
    lengths = layout.per_unit(mask_lengths(response_mask)) if needs.lengths or transforms is not None else None
    if transforms is not None:
        # the transforms' units are those with a model token, whatever verl's estimator: a unit without one (a response
        # cut to nothing) stays a sample of its group's estimate, but is no unit of a transform's statistics
        transforms.context = {"lengths": lengths, "mean_logprobs": _mean_logprobs(transforms, index, response_mask, lengths, layout)}
        task_scores = current_scores(index) if names_context(transforms, "scores") else None  # never the (KL-penalised) rewards
        transforms.context["scores"] = None if task_scores is None else task_scores[layout.final_rows]
        if keyed is not None:  # the units' rewards as after verl's own estimators: their summed token_level_rewards
            transforms.context["rewards"] = reward_sums(token_level_rewards)[layout.final_rows]
        if not unit_has.all():
            transforms.parts = [(VERL_ROLE, None, unit_has)]
    live, combine = None, None
    if needs.state:  # the scan order: v1 by uid and session (above), legacy the rows' (groups by first appearance); padding left out
        if keyed is not None:
            unit = "session" if by_session else "row"
            raise ValueError(f"{where} is stateful (a running baseline over one reward per {unit}): remove algorithm.gdpo_reward_keys")
        live = unit_has  # a unit without model tokens never touches the state
    elif keyed is not None:
        combine = functools.partial(_combined, aggregation=keyed.aggregation, weights=keyed.weights, names=keyed.keys, where=where)

    def not_finite(per_unit: np.ndarray, _: str) -> str:
        advantages = layout.to_rows(per_unit)
        row = int(np.flatnonzero(~np.isfinite(advantages))[0])
        unit = "the session of row" if by_session else "row"
        return f"{call.who} gave advantage {advantages[row]} for {unit} {row} (uid {index[row]!r})"

    units = "sessions" if by_session else "rows"
    wording = Wording(f"{units} with model tokens" if live is not None else units, not_finite)
    state = verl_estimator_state() if needs.state else None
    values = scores if layout.identity else scores[layout.final_rows]
    shapers = unit_shapers(config, index, response_mask, layout)
    grouped, commit = run_outcome(
        call, values, layout.unit_offsets, wording=wording, role=VERL_ROLE, state=state, lengths=lengths if needs.lengths else None,
        live=live, combine=combine, transforms=transforms, shapers=shapers,
    )  # fmt: skip
    advantages = layout.to_rows(grouped)
    check_representable(advantages, dtype, where, index)
    check_token_part(config, index)  # before the commit: a run the token part will refuse leaves the state as it was
    commit()  # every check passed
    for stage in (shapers, transforms):
        if stage is not None:
            publish_current(stage.metrics, prefix="rllm/")
    out = write_advantages(advantages, response_mask.to(token_level_rewards.device), dtype)
    return out, out


def _mean_logprobs(transforms: Any, index: np.ndarray, mask: torch.Tensor, lengths: np.ndarray | None, layout: Layout) -> np.ndarray | None:
    """``(N,)`` each unit's mean ``old_log_probs`` over its model tokens, when a transform names ``mean_logprobs`` and the batch
    verl is processing has them; else None."""
    if not names_context(transforms, "mean_logprobs"):
        return None
    logprobs = current_tensor(index, "old_log_probs")
    if logprobs is None or lengths is None:
        return None
    sums = (logprobs.detach().to("cpu", torch.float64) * mask.detach().to("cpu", torch.float64)).sum(dim=-1).numpy()
    return layout.per_unit(sums) / np.maximum(lengths, 1.0)


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
