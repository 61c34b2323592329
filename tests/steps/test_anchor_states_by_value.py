"""Anchor states are grouped by value: arrays and tensors as the tuple of their values; NaN, None and identity-hashed states refused.

Before, three steps observing ``torch.tensor([1, 2])`` formed three singleton anchor groups (step part 0),
one shared NaN object was pooled while two NaN objects were not, and None was a state in the list form.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.estimators import calculate_gigpo_advantages

torch = pytest.importorskip("torch")  # the core without torch (the Python 3.10 and 3.12 cells of make compat) skips this file

EPS = 1e-6
OUTCOMES = [1.0, 0.0, 0.0]


def plain_grpo(values: list[float]) -> list[float]:
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return [(v - mean) / (std + EPS) for v in values]


def one_step_group(states: list[object]) -> TrajectoryGroup:
    """Three one-step trajectories; each step's reward is its trajectory's outcome, so its return is the outcome."""
    return TrajectoryGroup([Trajectory(steps=[Step(reward=r, observation=s)], reward=r) for r, s in zip(OUTCOMES, states, strict=True)], group_id="task0:agent")


def gigpo_of(states: list[object]) -> list[float]:
    group = one_step_group(states)
    collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(estimator="gigpo"))
    return [t.steps[0].advantage for t in group.trajectories]


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.tensor([1, 2]),
        lambda: torch.tensor([1.0, 2.0], dtype=torch.bfloat16),
        lambda: np.array([1, 2]),
        lambda: np.array([[1, 2]]),
        lambda: (1, 2),
    ],
    ids=["int-tensor", "bf16-tensor", "array", "2d-array", "tuple"],
)
def test_equal_states_built_apart_form_one_anchor_group(make):
    # one anchor group of all three steps: the step part is grpo of the same returns, so gigpo = (1 + 1) * grpo
    want = [2 * a for a in plain_grpo(OUTCOMES)]
    assert gigpo_of([make() for _ in OUTCOMES]) == pytest.approx(want, rel=1e-9)


def test_a_tensor_an_array_and_a_tuple_of_the_same_values_are_one_state():
    want = [2 * a for a in plain_grpo(OUTCOMES)]
    assert gigpo_of([torch.tensor([1, 2]), np.array([1.0, 2.0]), (1, 2)]) == pytest.approx(want, rel=1e-9)


def test_tensors_of_other_values_stay_apart():
    assert gigpo_of([torch.tensor([1, 2]), torch.tensor([1, 3]), torch.tensor([2, 1])]) == pytest.approx(plain_grpo(OUTCOMES), rel=1e-9)


@pytest.mark.parametrize(
    "states",
    [
        [math.nan] * 3,  # one shared NaN object: was pooled
        [float("nan"), float("nan"), "s"],  # two NaN objects: were apart
        [np.float64("nan"), "s", "s"],
        ["s", torch.tensor([1.0, math.nan]), "s"],
    ],
    ids=["shared", "two", "numpy", "in-a-tensor"],
)
def test_a_nan_state_is_refused_naming_the_step(states):
    s = next(i for i, state in enumerate(states) if isinstance(state, torch.Tensor) or state != state)
    with pytest.raises(ValueError, match=rf"group 0 \(group_id 'task0:agent'\), trajectory {s}, step 0: anchor state .* NaN, which equals nothing"):
        gigpo_of(states)


class ByValueButIdentityHashed:
    def __init__(self, value: int) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ByValueButIdentityHashed) and other.value == self.value

    __hash__ = object.__hash__


def test_an_object_whose_eq_and_hash_disagree_is_refused():
    with pytest.raises(ValueError, match=r"trajectory 0, step 0: anchor state ByValueButIdentityHashed .* compares by value \(==\) but hashes by identity"):
        gigpo_of([ByValueButIdentityHashed(1) for _ in OUTCOMES])


def test_none_is_no_state_in_the_list_form_too():
    with pytest.raises(ValueError, match=r"group 0, trajectory 1, step 0: anchor state is None, which means no state; give every step a state"):
        calculate_gigpo_advantages([OUTCOMES], [[[r] for r in OUTCOMES]], [[["s"], [None], ["s"]]])


def test_numbers_equal_by_value_are_one_state_as_python_says():
    # 1 == 1.0 == np.int64(1) == True: one state (Python's == and hash agree on these)
    want = [2 * a for a in plain_grpo(OUTCOMES)]
    assert gigpo_of([1, 1.0, np.int64(1)]) == pytest.approx(want, rel=1e-9)
