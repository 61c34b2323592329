"""Session-level ``rllm_*`` advantages in verl's v1 ``compute_advantage_for_multi_trajectories``.

verl's v1 trainer calls ``compute_advantage_for_multi_trajectories(data, batch_keys, ...)`` with
one key ``{uid}_{session_id}_{index}`` per output row; verl itself treats a session as one
trajectory only for ``grpo``. This extension does so for every estimator registered by us
(``rllm_*``): one trajectory per session, its reward the final output's reward
(``token_level_rewards`` of that row summed in float64, or its scores under
``algorithm.gdpo_reward_keys``, aggregated as :mod:`.multi_objective` says), the estimator over
the sessions of each ``uid`` with the options checked as on the row path, and the session's
advantage on every output row times its ``response_mask`` (``advantages`` and ``returns``). Batches with one output per session, and every other estimator
name, go to verl's own function unchanged. Opt out with ``RLLM_PLUGINS_VERL_SESSIONS=0``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rllm_verl.compute.sessions import Sessions, first_outputs_only, parse_sessions, session_advantages
from rllm_verl.compute.transforms import transform_configured
from rllm_verl.context import verl_arguments
from rllm_verl.extension import ADVANTAGE_PARAMETERS, NO_DEFAULT, Extension

if TYPE_CHECKING:
    from rllm_plugins.run import Call

__all__ = ["SESSIONS", "SESSIONS_ENV", "extend", "session_compute"]

SESSIONS_ENV = "RLLM_PLUGINS_VERL_SESSIONS"


def _rllm_name(adv_estimator: Any) -> str | None:
    """The rLLM estimator behind verl's name ``adv_estimator`` when we registered it, else None."""
    if not isinstance(adv_estimator, str):
        return None
    from verl.trainer.ppo import core_algos

    return getattr(core_algos.ADV_ESTIMATOR_REGISTRY.get(adv_estimator), "rllm_estimator", None)


def session_compute(name: str, data: Any, sessions: Sessions, config: Any, keys: Sequence[Any] | None = None) -> Any:
    """Write the session-level advantages of the rLLM estimator ``name`` into ``data`` (a verl DataProto); returns it.

    ``keys``: the rows' batch keys; a stateful estimator then scans the sessions by uid and session id (verl's
    balancing cannot change that order), else in order of first appearance."""
    import numpy as np
    import torch

    from rllm_plugins.aggregation import aggregate_advantages
    from rllm_plugins.registry import get_estimator
    from rllm_plugins.run import Call, Wording, run_outcome
    from rllm_verl.compute.multi_objective import reward_key_options, reward_table
    from rllm_verl.compute.order import scan_order
    from rllm_verl.compute.outcome import check_inputs, check_representable, estimator_options, group_rows, model_rows, output_dtype
    from rllm_verl.compute.state import VERL_ROLE, verl_estimator_state
    from rllm_verl.compute.tokens import check_has_tokens, mask_lengths, rows_with_tokens, write_advantages

    where = f"advantage estimator 'rllm_{name}' (sessions of compute_advantage_for_multi_trajectories)"
    rewards, mask, uids = data.batch["token_level_rewards"], data.batch["response_mask"], data.non_tensor_batch["uid"]
    check_inputs(where, rewards, mask, uids)
    row_has = rows_with_tokens(mask)
    check_has_tokens(where, row_has)
    estimator = get_estimator(name)  # resolved once: every check and call below uses it
    options = estimator_options(config, where, {name: estimator})
    keyed = reward_key_options(config, where)
    call = Call(estimator, options, f"{where}: the estimator ({estimator.provider})")
    if estimator.spec.level == "step":
        return _session_steps(name, call, where, data, sessions, config, keyed is not None, keys)
    with torch.no_grad():
        combine = None
        if keyed is None:
            finals = torch.from_numpy(sessions.final_rows).to(rewards.device)
            session_rewards = rewards.index_select(0, finals).to(torch.float64).sum(dim=-1).cpu().numpy()
            if not np.isfinite(session_rewards).all():
                row = int(sessions.final_rows[np.flatnonzero(~np.isfinite(session_rewards))[0]])
                raise ValueError(f"{where}: row {row} (uid {uids[row]!r}) has a non-finite reward; token_level_rewards must be finite")
        else:  # the final outputs' scores under algorithm.gdpo_reward_keys (S, F), aggregated as on the row path
            session_rewards = reward_table(data.non_tensor_batch, keyed.keys, uids, where)[sessions.final_rows]

            def combine(form: Any, values: Any, offsets: Any, /, **kwargs: Any) -> Any:
                aggregation, weights = keyed.aggregation, keyed.weights
                return aggregate_advantages(values, offsets, form, aggregation=aggregation, weights=weights, names=keyed.keys, where=where, **kwargs)

        lengths = None
        if call.needs.lengths:  # a session's length: its response tokens over all its outputs
            lengths = np.bincount(sessions.session_of_row, weights=mask_lengths(mask), minlength=len(sessions.final_rows))
        session_has = np.bincount(sessions.session_of_row, weights=row_has, minlength=len(sessions.final_rows)) > 0
        real = model_rows(session_has, *group_rows(sessions.uids))  # uids of verl's padding (no model token): in no statistic, 0
        commits = []
        grouping, live = None, None
        if call.needs.state:  # a session without model tokens never touches the state
            if keyed is not None:
                raise ValueError(f"{where} is stateful (a running baseline over one reward per session): remove algorithm.gdpo_reward_keys")
            live = session_has
            if keys is not None:
                kept = np.arange(len(sessions.final_rows)) if real is None else real
                live_uids = sessions.uids if real is None else sessions.uids[real]
                grouping = scan_order(live_uids, [str(keys[sessions.final_rows[s]]) for s in kept.tolist()], where)

        def estimate(values: Any, offsets: Any, *, lengths: Any, live: Any, not_finite: Any) -> Any:
            # the messages of the session path name "the estimator" (its provider is added below); a stateful one's, the rows
            wording = Wording("sessions", not_finite, who="the estimator") if live is None else Wording("rows with model tokens", not_finite)
            state = verl_estimator_state() if call.needs.state else None
            advantages, commit = run_outcome(call, values, offsets, wording=wording, role=VERL_ROLE, state=state, lengths=lengths, live=live, combine=combine)
            commits.append(commit)
            return advantages

        try:
            per_row = session_advantages(estimate, sessions, session_rewards, session_lengths=lengths, real=real, grouping=grouping, live=live)
        except ValueError as error:
            raise ValueError(f"{where}: {error} ({estimator.provider})") from error
        dtype = output_dtype(rewards)
        check_representable(per_row, dtype, where, uids)
        for commit in commits:  # every check passed
            commit()
        scores = write_advantages(per_row, mask, dtype)
    data.batch["advantages"] = scores
    data.batch["returns"] = scores
    return data


def _session_steps(name: str, call: Call, where: str, data: Any, sessions: Sessions, config: Any, keyed: bool, keys: Sequence[Any] | None) -> Any:
    """A step-level estimator over sessions: a session is one episode whose steps are the turns of its outputs, in index order.

    Its outcome is its final output's total reward (as for outcome-level names); each turn's reward
    and anchor follow the row rule (:mod:`rllm_plugins.steps.turns`).
    """
    import numpy as np
    import torch

    from rllm_verl.compute.order import scan_order
    from rllm_verl.compute.outcome import group_rows
    from rllm_verl.compute.steps import Episodes, StepSources, compute_rllm_step_advantage, step_sources

    if keyed:
        raise ValueError(f"{where} is step-level: algorithm.gdpo_reward_keys (one score per row and key) cannot apply; remove it")
    if keys is not None and call.needs.state:  # a running baseline: by uid and session, whatever verl's balancing did
        order, offsets = scan_order(sessions.uids, [str(keys[row]) for row in sessions.final_rows.tolist()], where)
    else:
        order, offsets = group_rows(sessions.uids)
    session_order = np.arange(sessions.uids.size) if order is None else order
    rank = np.empty(session_order.size, dtype=np.int64)
    rank[session_order] = np.arange(session_order.size)
    rows = np.lexsort((sessions.output_index, rank[sessions.session_of_row]))
    row_offsets = np.zeros(session_order.size + 1, dtype=np.int64)
    np.cumsum(np.bincount(sessions.session_of_row, minlength=session_order.size)[session_order], out=row_offsets[1:])
    episodes = Episodes(rows, row_offsets, offsets, sessions.final_rows[session_order])
    rewards, mask, uids = data.batch["token_level_rewards"], data.batch["response_mask"], data.non_tensor_batch["uid"]
    dtype = rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype()
    tensors = data.batch.keys()
    responses = data.batch["responses"] if "responses" in tensors else None
    prompts = data.batch["prompts"] if "prompts" in tensors else None
    sources = StepSources()
    if call.needs.anchors:
        sources = step_sources(uids, rewards.shape[-1], where, responses, data.non_tensor_batch, prompts)
    values = data.batch["values"] if call.needs.values and "values" in tensors else None
    with torch.no_grad():
        advantages, returns = compute_rllm_step_advantage(name, call, where, rewards, mask, uids, episodes, config, dtype, sources, values)
    data.batch["advantages"] = advantages
    data.batch["returns"] = returns
    return data


def extend(original: Callable[..., Any]) -> Callable[..., Any]:
    """verl's ``compute_advantage_for_multi_trajectories`` with session-level ``rllm_*`` estimators."""

    def compute_advantage_for_multi_trajectories(
        data: Any,
        batch_keys: Any,
        adv_estimator: Any,
        gamma: float = 1.0,
        lam: float = 1.0,
        num_repeat: int = 1,
        norm_adv_by_std_in_grpo: bool = True,
        config: Any = None,
    ) -> Any:
        name = _rllm_name(adv_estimator)
        if name is None or batch_keys is None or "uid" not in data.non_tensor_batch:
            return original(data, batch_keys, adv_estimator, gamma, lam, num_repeat, norm_adv_by_std_in_grpo, config)
        if len(batch_keys) == len(data) and first_outputs_only(batch_keys):  # the usual case, without parsing keys
            return original(data, batch_keys, adv_estimator, gamma, lam, num_repeat, norm_adv_by_std_in_grpo, config)
        try:
            sessions = parse_sessions(list(batch_keys), data.non_tensor_batch["uid"])
        except ValueError as error:
            raise ValueError(f"advantage estimator {adv_estimator!r} in compute_advantage_for_multi_trajectories: {error}") from None
        if sessions.one_output_each:
            return original(data, batch_keys, adv_estimator, gamma, lam, num_repeat, norm_adv_by_std_in_grpo, config)
        if "response_mask" not in data.batch.keys():  # noqa: SIM118 - a TensorDict
            from verl.trainer.ppo.ray_trainer import compute_response_mask

            data.batch["response_mask"] = compute_response_mask(data)
        with verl_arguments({"gamma": gamma, "lam": lam, "norm_adv_by_std_in_grpo": norm_adv_by_std_in_grpo}):
            out = session_compute(name, data, sessions, config, list(batch_keys))
        transform_configured(out, config)  # algorithm.rllm_advantage_transforms, on the output rows (verl's compute_advantage is not called here)
        return out

    compute_advantage_for_multi_trajectories.__doc__ = (
        f"{original.__doc__ or ''}\n\n    rllm-plugins: for ``rllm_*`` estimators, a session with several outputs is one "
        "trajectory (its final output's reward) whose advantage goes to all its outputs; see rllm_verl.patches.sessions."
    )
    compute_advantage_for_multi_trajectories.__module__ = original.__module__
    return compute_advantage_for_multi_trajectories


SESSIONS = Extension(
    name="sessions",
    module="verl.trainer.ppo.v1.utils",
    attribute="compute_advantage_for_multi_trajectories",
    parameters=(("data", NO_DEFAULT), ("batch_keys", NO_DEFAULT), *ADVANTAGE_PARAMETERS),
    make=extend,
    env=SESSIONS_ENV,
    bound_in=("verl.trainer.ppo.v1.trainer_base",),
    requires="v1_trainer",
)
