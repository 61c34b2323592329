"""The state of stateful estimators (``rae``'s running baselines) in TRL: task ids, and saving it with checkpoints.

Every process computes the advantages of the gathered batch, so every process holds the same state
(``RLLMAdvantageMixin.estimator_state``), updated by training generations only (an evaluation runs on a
copy). It is saved as ``checkpoint-<step>/rllm_estimator_state.json`` by the main process and read back
by every process on ``trainer.train(resume_from_checkpoint=...)``, the way TRL saves its own adaptive
entropy state (after ``_save_checkpoint``; in ``_load_optimizer_and_scheduler``).
"""

from __future__ import annotations

import json
import os
from typing import Any

from rllm_plugins.state import EstimatorState

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


def load_state(state: EstimatorState, checkpoint: str) -> bool:
    """Replace ``state`` by the one saved in ``checkpoint``; False (``state`` cleared) when there is none."""
    path = os.path.join(checkpoint, STATE_FILE)
    if not os.path.exists(path):
        state.clear()
        return False
    with open(path, encoding="utf-8") as f:
        state.load_state_dict(json.load(f))
    return True
