"""The state of stateful ``rllm_*`` estimators in verl (``rllm_rae``'s running baselines), saved with verl's checkpoints.

verl calls a registered estimator in the process that runs the trainer's ``fit`` (the TaskRunner
actor), so that process keeps the state: :func:`verl_estimator_state`, one per estimator and role
(verl's registry path has no roles: ``"all_groups"``). A call that raises leaves it unchanged.

verl 0.9.1 has no hook to save extra state with a checkpoint (v1's ``checkpoint_callback`` only
sees saves, and only when configured), so four guarded extensions (:mod:`.extension`) wrap the
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
import inspect
import json
import logging
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from rllm_plugins.registry import get_estimator
from rllm_plugins.state.options import accepted_from_env, state_schemas
from rllm_plugins.state.store import EstimatorState

from .extension import Extension

__all__ = [
    "CHECKPOINTS",
    "ENV",
    "STATE_FILE",
    "VERL_ROLE",
    "checkpoint_folder",
    "checkpoint_status",
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
    """Within the block, stateful estimators start from nothing and keep their state apart (``verl-check``'s trial runs)."""
    global _STATE
    kept, _STATE = _STATE, EstimatorState()
    try:
        yield _STATE
    finally:
        _STATE = kept


def checkpoint_folder(trainer: Any) -> str | None:
    """The ``global_step_<N>`` folder verl just saved or loaded (None when it loaded nothing)."""
    trainer_config = trainer.config.trainer
    if trainer_config.get("resume_mode", "auto") == "resume_path" and trainer_config.get("resume_from_path"):
        folder = str(trainer_config.resume_from_path)
    else:
        if not getattr(trainer, "global_steps", 0):
            return None
        folder = os.path.join(str(trainer_config.default_local_dir), f"global_step_{trainer.global_steps}")
    return folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)


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
    """``algorithm.adv_estimator`` when it names a stateful estimator we registered in verl (else None)."""
    from verl.trainer.ppo import core_algos

    algorithm = config.get("algorithm") or {}
    name = algorithm.get("adv_estimator")
    rllm_name = getattr(core_algos.ADV_ESTIMATOR_REGISTRY.get(name), "rllm_estimator", None) if isinstance(name, str) else None
    try:
        return name if rllm_name is not None and get_estimator(rllm_name).spec.stateful else None
    except ValueError:
        return None


def _after_save(original: Callable[..., Any]) -> Callable[..., Any]:
    def _save_checkpoint(self: Any) -> Any:
        out = original(self)
        save_state(os.path.join(str(self.config.trainer.default_local_dir), f"global_step_{self.global_steps}"))
        return out

    return _save_checkpoint


def _after_load(original: Callable[..., Any]) -> Callable[..., Any]:
    def _load_checkpoint(self: Any) -> Any:
        out = original(self)
        if self.config.trainer.get("resume_mode", "auto") != "disable":
            load_state(checkpoint_folder(self), stateful_estimator(self.config))
        return out

    return _load_checkpoint


_SELF = (("self", inspect.Parameter.empty),)
_TRAINERS = {"legacy": ("verl.trainer.ppo.ray_trainer", "RayPPOTrainer"), "v1": ("verl.trainer.ppo.v1.trainer_base", "PPOTrainer")}

CHECKPOINTS: tuple[Extension, ...] = tuple(
    Extension(
        name=f"estimator_state_{what}_{trainer}",
        module=module,
        attribute=f"{cls}._{what}_checkpoint",
        parameters=_SELF,
        make=make,
        env=ENV,
    )
    for trainer, (module, cls) in _TRAINERS.items()
    for what, make in (("save", _after_save), ("load", _after_load))
)
"""The four extensions: save and load, on the legacy and the v1 trainer."""


def checkpoint_status() -> str:
    """For ``verl-check``: the four extensions' status and where the state is saved (imports the trainer modules)."""
    import importlib

    from .extension import extension_status, install

    statuses = {}
    for extension in CHECKPOINTS:
        install(extension)
        try:
            importlib.import_module(extension.module)  # importing it applies a pending extension
        except Exception as error:
            statuses[extension.name] = f"not applied: {extension.module} cannot be imported ({type(error).__name__}: {error})"
            continue
        statuses[extension.name] = extension_status().get(extension.name, "not installed")
    where = f"saved to <trainer.default_local_dir>/global_step_<N>/{STATE_FILE} with each checkpoint, restored on resume"
    if all(status == "active" for status in statuses.values()):
        return f"active: {where}"
    return "; ".join(f"{name}: {status}" for name, status in statuses.items())
