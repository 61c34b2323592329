"""Session-level ``rllm_*`` advantages in verl's v1 ``compute_advantage_for_multi_trajectories``.

verl's v1 trainer calls ``compute_advantage_for_multi_trajectories(data, batch_keys, ...)`` with
one key ``{uid}_{session_id}_{index}`` per output row; verl itself treats a session as one
trajectory only for ``grpo``. This extension does so for every estimator registered by us
(``rllm_*``): one trajectory per session, its reward the final output's reward
(``token_level_rewards`` of that row summed in float64, or its scores under
``algorithm.gdpo_reward_keys``, aggregated as :mod:`rllm_verl.compute.multi_objective` says), the estimator over
the sessions of each ``uid`` with the options checked as on the row path, and the session's
advantage on every output row times its ``response_mask`` (``advantages`` and ``returns``): the row walk with
sessions as its units (:func:`rllm_verl.compute.outcome.compute_rllm_advantage`), transforms included. Batches with
one output per session go to verl's own function unchanged; so does every other estimator name, after which
``algorithm.rllm_advantage_transforms`` see whole sessions where verl broadcast one advantage over a session
(:mod:`rllm_verl.compute.transforms`). Opt out with ``RLLM_PLUGINS_VERL_SESSIONS=0``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rllm_verl.compute.outcome import compute_rllm_advantage
from rllm_verl.compute.sessions import Sessions, first_outputs_only, parse_sessions
from rllm_verl.compute.shaping import own_shaping, shapers_of
from rllm_verl.compute.transforms import deferred, transform_configured, transforms_of
from rllm_verl.context import processing
from rllm_verl.extension import ADVANTAGE_PARAMETERS, NO_DEFAULT, Extension
from rllm_verl.registration import rllm_name

__all__ = ["SESSIONS", "SESSIONS_ENV", "extend", "session_compute"]

SESSIONS_ENV = "RLLM_PLUGINS_VERL_SESSIONS"


def session_compute(name: str, data: Any, sessions: Sessions, config: Any, keys: Sequence[Any] | None = None) -> Any:
    """Write the session-level advantages of the rLLM estimator ``name`` into ``data`` (a verl DataProto); returns it.

    The row walk with sessions as its units (:func:`rllm_verl.compute.outcome.compute_rllm_advantage`). ``keys``: the
    rows' batch keys; a stateful estimator then scans the sessions by uid and session id (verl's balancing cannot
    change that order), else in order of first appearance."""
    batch, tensors = data.batch, data.batch.keys()
    optional = {key: batch[key] if key in tensors else None for key in ("responses", "values", "prompts")}
    advantages, returns = compute_rllm_advantage(
        name, batch["token_level_rewards"], batch["response_mask"], data.non_tensor_batch["uid"], config, data.non_tensor_batch,
        optional["responses"], optional["values"], sessions=sessions, keys=None if keys is None else [str(key) for key in keys],
        prompts=optional["prompts"],
    )  # fmt: skip
    data.batch["advantages"] = advantages
    data.batch["returns"] = returns
    return data


def _verls_own(original: Callable[..., Any], data: Any, batch_keys: Any, adv_estimator: Any, *args: Any) -> Any:
    """verl's own estimator through verl's function, the rewards shaped for its length and the transforms deferred to after it: verl's ``grpo`` computes on each
    session's final output (a sub-batch) and copies one value per row back, which would flatten a token-level transform
    applied inside. The transforms then see verl's units: a session where ``grpo`` broadcast one advantage over it, else
    each row."""
    from verl.trainer.ppo import core_algos

    config = args[-1]
    if not transforms_of(config) and not shapers_of(config):  # nothing to shape or defer: verl's function as it is
        return original(data, batch_keys, adv_estimator, *args)
    sessions = None
    grpo = adv_estimator == core_algos.AdvantageEstimator.GRPO
    if grpo and batch_keys is not None and "uid" in data.non_tensor_batch and not first_outputs_only(batch_keys):
        try:
            sessions = parse_sessions(list(batch_keys), data.non_tensor_batch["uid"])
        except ValueError:  # keys verl reads its own way: each row its own unit
            sessions = None
    with deferred(), own_shaping(data, config, sessions, adv_estimator):  # the whole batch shaped once, each session a unit under grpo
        out = original(data, batch_keys, adv_estimator, *args)
    transform_configured(out, config, sessions=sessions)
    return out


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
        name = rllm_name(adv_estimator)
        if name is None:  # verl's own estimator: verl's function, then the transforms on the whole batch (below)
            return _verls_own(original, data, batch_keys, adv_estimator, gamma, lam, num_repeat, norm_adv_by_std_in_grpo, config)
        if batch_keys is None or "uid" not in data.non_tensor_batch:
            return original(data, batch_keys, adv_estimator, gamma, lam, num_repeat, norm_adv_by_std_in_grpo, config)
        if len(batch_keys) == len(data) and first_outputs_only(batch_keys):  # the usual case, without parsing keys
            return original(data, batch_keys, adv_estimator, gamma, lam, num_repeat, norm_adv_by_std_in_grpo, config)
        try:
            sessions = parse_sessions(list(batch_keys), data.non_tensor_batch["uid"])
        except ValueError as error:
            raise ValueError(f"advantage estimator {adv_estimator!r} in compute_advantage_for_multi_trajectories: {error}") from None
        if sessions.one_output_each:
            return original(data, batch_keys, adv_estimator, gamma, lam, num_repeat, norm_adv_by_std_in_grpo, config)
        given = {"gamma": gamma, "lam": lam, "norm_adv_by_std_in_grpo": norm_adv_by_std_in_grpo}
        if "response_mask" not in data.batch.keys():  # noqa: SIM118 - a TensorDict
            from verl.trainer.ppo.ray_trainer import compute_response_mask

            data.batch["response_mask"] = compute_response_mask(data)
        with processing(data, given):
            out = session_compute(name, data, sessions, config, list(batch_keys))
            transform_configured(out, config, sessions=sessions, units_done=True)  # the token part (the run applied the rest)
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
