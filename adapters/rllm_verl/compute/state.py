"""The state of stateful ``rllm_*`` estimators in verl (``rllm_rae``'s running baselines), saved with verl's checkpoints.

verl calls a registered estimator in the process that runs the trainer's ``fit`` (the TaskRunner
actor), so that process keeps the state: :func:`verl_estimator_state`, one per estimator and role
(verl's registry path has no roles: ``"all_groups"``). A call that raises leaves it unchanged.

verl 0.9.1 has no hook to save extra state with a checkpoint (v1's ``checkpoint_callback`` only
sees saves, and only when configured), so four guarded extensions (:mod:`rllm_verl.extension`) wrap the
trainers' own methods: ``RayPPOTrainer._save_checkpoint`` / ``_load_checkpoint`` (legacy,
``trainer.use_v1=false``) and ``PPOTrainer._save_checkpoint`` / ``_load_checkpoint`` (v1). After
verl saves ``<trainer.default_local_dir>/global_step_<N>/``, the state goes to
``global_step_<N>/rllm_estimator_state.json`` (only when some stateful estimator ran); after verl
loads a checkpoint, the state is read from the same folder (or ``trainer.resume_from_path``). Opt
out with ``RLLM_PLUGINS_VERL_ESTIMATOR_STATE=0`` (the state then restarts from nothing on resume).

A checkpoint without the file, when ``algorithm.adv_estimator`` is a stateful ``rllm_*`` estimator,
gives a ``RuntimeWarning`` naming the path (its baselines start from 0). The file's options are
compared with the run's at the first advantage step after the resume (``ValueError`` naming the
option and both values, unless ``RLLM_PLUGINS_ACCEPT_CHANGED_STATE_OPTIONS`` names it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import warnings
from collections.abc import Iterator
from typing import Any

from rllm_plugins.registry import get_estimator, state_schemas
from rllm_plugins.state.store import EstimatorState, accepted_from_env
from rllm_verl.context import quiet_provenance

__all__ = [
    "ENV",
    "STATE_FILE",
    "VERL_ROLE",
    "load_state",
    "save_state",
    "scratch_state",
    "stateful_estimator",
    "verl_estimator_state",
]

logger = logging.getLogger(__name__)

STATE_FILE = "rllm_estimator_state.json"
VERL_ROLE = "all_groups"  # the role a stateful estimator's state is kept under (verl's registry path has no roles)
ENV = "RLLM_PLUGINS_VERL_ESTIMATOR_STATE"
_STATE = EstimatorState()


def verl_estimator_state() -> EstimatorState:
    """This process's states of the stateful ``rllm_*`` estimators."""
    return _STATE


@contextlib.contextmanager
def scratch_state() -> Iterator[EstimatorState]:
    """Within the block, stateful estimators start from nothing and keep their state apart, and no provenance line is
    printed (``verl-check``'s trial runs)."""
    global _STATE
    kept, _STATE = _STATE, EstimatorState()
    try:
        with quiet_provenance():
            yield _STATE
    finally:
        _STATE = kept


def save_state(folder: str) -> str | None:
    """Write the state into ``folder`` (when there is any); returns the file written."""
    if not _STATE:
        return None
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, STATE_FILE)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(_STATE.to_json())
    os.replace(tmp, path)  # a crash mid-write leaves the previous file
    logger.info("rllm-plugins: saved the stateful estimators' state to %s", path)
    return path


def load_state(folder: str | None, stateful: str | None = None) -> bool:
    """Replace the state by the one saved in ``folder``; False (the state cleared) when the folder has none.

    ``stateful`` (the configured stateful estimator's verl name): a folder without the file then
    gives a ``RuntimeWarning`` naming the path.
    """
    path = None if folder is None else os.path.join(folder, STATE_FILE)
    if path is None or not os.path.exists(path):
        if folder is not None and stateful is not None:
            warnings.warn(
                f"rllm-plugins: verl resumed from {folder}, which has no {STATE_FILE} (expected at {path}); the running baselines of {stateful} start from 0",
                RuntimeWarning,
                stacklevel=2,
            )
        elif folder is not None:
            logger.info("rllm-plugins: %s has no %s; stateful estimators start from nothing", folder, STATE_FILE)
        _STATE.clear()
        return False
    with open(path, encoding="utf-8") as f:
        saved = json.load(f)
    names = saved.get("estimators", {}) if isinstance(saved, dict) and isinstance(saved.get("estimators"), dict) else {}
    _STATE.load_state_dict(saved, schemas=state_schemas(names), accept_changed_options=accepted_from_env(), source=path)
    logger.info("rllm-plugins: restored the stateful estimators' state from %s", path)
    return True


def stateful_estimator(config: Any) -> str | None:
    """``algorithm.adv_estimator`` when it names an estimator we registered in verl that keeps a state with its options
    (``algorithm.rllm_estimator_kwargs``): a stateful one, or a ``composite`` with a stateful term (else None)."""
    from verl.trainer.ppo import core_algos

    from rllm_plugins.needs import needs_of

    algorithm = config.get("algorithm") or {}
    name = algorithm.get("adv_estimator")
    rllm_name = getattr(core_algos.ADV_ESTIMATOR_REGISTRY.get(name), "rllm_estimator", None) if isinstance(name, str) else None
    options = algorithm.get("rllm_estimator_kwargs") or {}
    try:
        from omegaconf import OmegaConf

        options = OmegaConf.to_container(options, resolve=True) if OmegaConf.is_config(options) else dict(options)
        return name if rllm_name is not None and needs_of(get_estimator(rllm_name).spec, options).state else None
    except (ValueError, TypeError):  # bad options: the advantage step refuses them, naming them
        return None
