"""The state of stateful estimators (``rae``'s running baselines) in TRL: task ids, and saving it with checkpoints.

Every process computes the advantages of the gathered batch, so every process holds the same state
(``RLLMAdvantageMixin.estimator_state``), updated by training generations only (an evaluation runs on a
copy). It is saved as ``checkpoint-<step>/rllm_estimator_state.json`` by the main process and read back
by every process on ``trainer.train(resume_from_checkpoint=...)``, the way TRL saves its own adaptive
entropy state (after ``_save_checkpoint``; in ``_load_optimizer_and_scheduler``).

On resume the file's options are compared with the trainer's (``ValueError`` naming the option and
both values, unless ``RLLM_PLUGINS_ACCEPT_CHANGED_STATE_OPTIONS`` names it), and a checkpoint without
the file, when a stateful estimator is configured, gives a ``RuntimeWarning`` naming the path: its
baselines start from 0.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from typing import Any

from rllm_plugins.registry import state_schemas
from rllm_plugins.state.store import EstimatorState, accepted_from_env

__all__ = ["STATE_FILE", "load_state", "save_state", "task_id"]

STATE_FILE = "rllm_estimator_state.json"


def task_id(prompt: Any) -> str:
    """A stable task id of a prompt: the text itself, or the JSON of a conversation (a list of messages)."""
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str)


def save_state(state: EstimatorState, checkpoint: str) -> str | None:
    """Write ``state`` into the checkpoint folder (when it holds anything); returns the file written."""
    if not state:
        return None
    os.makedirs(checkpoint, exist_ok=True)
    path = os.path.join(checkpoint, STATE_FILE)
    with open(path, "w", encoding="utf-8") as f:
        f.write(state.to_json())
    return path


def load_state(state: EstimatorState, checkpoint: str, options: Mapping[str, Mapping[str, Any]] | None = None) -> bool:
    """Replace ``state`` by the one saved in ``checkpoint``; False (``state`` cleared) when there is none.

    ``options`` (stateful estimator name -> the options the trainer runs with) are compared with the
    file's; when given and the file is missing, a ``RuntimeWarning`` names the path.
    """
    path = os.path.join(checkpoint, STATE_FILE)
    if not os.path.exists(path):
        state.clear()
        if options:
            warnings.warn(
                f"rllm-plugins: resuming from {checkpoint}, which has no {STATE_FILE} (expected at {path}); "
                f"the running baselines of {sorted(options)} start from 0",
                RuntimeWarning,
                stacklevel=2,
            )
        return False
    with open(path, encoding="utf-8") as f:
        saved = json.load(f)
    names = saved.get("estimators", {}) if isinstance(saved, dict) and isinstance(saved.get("estimators"), dict) else {}
    state.load_state_dict(saved, options=options, schemas=state_schemas(names), accept_changed_options=accepted_from_env(), source=path)
    return True
