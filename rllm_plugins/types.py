"""rLLM's data model for outcome advantages: steps, trajectories and groups of trajectories."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _new_uid() -> str:
    import uuid  # on the first Trajectory made without a uid: not paid by `import rllm_plugins`

    return str(uuid.uuid4())


@dataclass
class Step:
    """One model call: its prompt and response tokens, a reward and (after collection) an advantage.

    ``advantage`` is a float (broadcast to every response token), a per-token list, or None.
    ``reward`` is the step's own reward and ``observation`` what the agent saw before acting; a
    step-level estimator reads both (the anchor state is ``metadata["anchor_state"]`` when given,
    else ``observation``). ``value`` is a critic's estimate of the step's state (the expected return from
    it), read by value-based step-level estimators (``turn_gae``); None: no critic. ``value_target`` is what such an
    estimator writes next to the advantage: the critic's regression target for the step (verl's ``returns``), None otherwise.
    """

    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reward: float = 0.0
    advantage: float | list[float] | None = None
    done: bool = False
    metadata: dict[str, Any] | None = None
    chat_completions: list[dict[str, Any]] = field(default_factory=list)
    model_response: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    observation: Any = None
    value: float | None = None
    value_target: float | None = None


@dataclass
class Trajectory:
    """A sequence of steps with one outcome ``reward`` (None until scored)."""

    steps: list[Step] = field(default_factory=list)
    reward: float | None = None
    name: str = "default_traj_name"
    uid: str = field(default_factory=_new_uid)
    metadata: dict[str, Any] | None = None


@dataclass
class TrajectoryGroup:
    """Trajectories whose rewards are compared with each other (e.g. n samples of one task).

    ``group_id`` is ``"<task>:<role>"``; :attr:`group_role` selects the estimator.
    """

    trajectories: list[Trajectory]
    group_id: str = ""
    metadata: list[dict[str, Any]] = field(default_factory=list)

    @property
    def group_role(self) -> str:
        """The field after the first ``:`` of ``group_id`` (up to a second ``:``), else ``"all_groups"``.

        ``"task7:solver" -> "solver"``; ``"task7" -> "all_groups"``; a trailing ``":"`` alone
        (``"task7:"``) also gives ``"all_groups"``, exactly as rLLM parses it.
        """
        return self.group_id.split(":")[1] if ":" in self.group_id[:-1] else "all_groups"

    @property
    def task_id(self) -> str:
        return self.group_id.split(":")[0]
