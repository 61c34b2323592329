"""Save and restore a stateful estimator's state with verl's checkpoints (both trainers).

Four extensions wrap ``_save_checkpoint`` and ``_load_checkpoint`` of the legacy ``RayPPOTrainer`` and the
v1 ``PPOTrainer``: after verl saves, the state is written next to its checkpoint
(:data:`rllm_verl.compute.state.STATE_FILE`); after verl loads, it is read back. Opt out with
``RLLM_PLUGINS_VERL_ESTIMATOR_STATE=0``.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

from rllm_verl.compute.state import ENV, STATE_FILE, load_state, save_state, stateful_estimator
from rllm_verl.extension import Extension, extension_status, install

__all__ = ["CHECKPOINTS", "checkpoint_folder", "checkpoint_status"]


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
# trainer -> (module, class, the verl feature it needs: rllm_verl.versions.VerlFeatures)
_TRAINERS = {
    "legacy": ("verl.trainer.ppo.ray_trainer", "RayPPOTrainer", None),
    "v1": ("verl.trainer.ppo.v1.trainer_base", "PPOTrainer", "v1_trainer"),
}

CHECKPOINTS: tuple[Extension, ...] = tuple(
    Extension(
        name=f"estimator_state_{what}_{trainer}",
        module=module,
        attribute=f"{cls}._{what}_checkpoint",
        parameters=_SELF,
        make=make,
        env=ENV,
        requires=requires,
    )
    for trainer, (module, cls, requires) in _TRAINERS.items()
    for what, make in (("save", _after_save), ("load", _after_load))
)
"""The four extensions: save and load, on the legacy and the v1 trainer."""


def checkpoint_status() -> str:
    """For ``verl-check``: the four extensions' status and where the state is saved (imports the trainer modules)."""
    import importlib

    statuses = {}
    for extension in CHECKPOINTS:
        if install(extension).startswith("absent"):  # this verl has no such trainer
            statuses[extension.name] = extension_status()[extension.name]
            continue
        try:
            importlib.import_module(extension.module)  # importing it applies a pending extension
        except Exception as error:
            statuses[extension.name] = f"not applied: {extension.module} cannot be imported ({type(error).__name__}: {error})"
            continue
        statuses[extension.name] = extension_status().get(extension.name, "not installed")
    where = f"saved to <trainer.default_local_dir>/global_step_<N>/{STATE_FILE} with each checkpoint, restored on resume"
    absent = [name for name, status in statuses.items() if status.startswith("absent")]
    if all(status == "active" for name, status in statuses.items() if name not in absent):
        return f"active: {where}" + (f" ({', '.join(absent)}: {statuses[absent[0]]})" if absent else "")
    return "; ".join(f"{name}: {status}" for name, status in statuses.items())
