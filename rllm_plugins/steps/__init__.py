"""The step level: each step (turn) of a trajectory gets its own advantage.

- :mod:`.batch` — :class:`StepBatch`, the flat steps of all trajectories a step-level estimator reads, and discounted returns;
- :mod:`.forms` — a step-level estimator's batched and list forms, each derived from the other;
- :mod:`.inputs` — a :class:`StepBatch` from trajectory groups (the collector's path);
- :mod:`.anchors` — anchor groups (steps of a task group that saw the same state);
- :mod:`.similarity` — anchor groups of similar states (GiGPO's similarity threshold);
- :mod:`.turns` — the turns of multi-turn rows (verl and TRL): runs of model tokens, their rewards and anchors;
- :mod:`.diagnostics` — mean advantage and reward by turn index.

A step-level plugin writes ``fn(batch: StepBatch, /, **options) -> (num_steps,) advantages``.
"""

from .batch import StepBatch, discounted_returns

__all__ = ["StepBatch", "discounted_returns"]
