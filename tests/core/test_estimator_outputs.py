"""One conversion rule for what estimators return: the collector, the derived forms and the adapters share it."""

from __future__ import annotations

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, collect_reward_and_advantage_from_trajectory_groups, register_rllm_adv_estimator, unregister_rllm_adv_estimator
from rllm_plugins.outputs import as_advantages, as_groups
from rllm_plugins.types import Step, Trajectory, TrajectoryGroup

torch = pytest.importorskip("torch")


def _collect(**config: object) -> list[object]:
    groups = [TrajectoryGroup([Trajectory(steps=[Step()], reward=1.0), Trajectory(steps=[Step()], reward=0.0)], "t1:solver")]
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(**config))  # type: ignore[arg-type]
    return [t.steps[0].advantage for t in groups[0].trajectories]


@pytest.fixture
def registered():
    names = []

    def register(name):
        def wrap(fn):
            register_rllm_adv_estimator(name)(fn)
            names.append(name)
            return fn

        return wrap

    yield register
    for name in names:
        unregister_rllm_adv_estimator(name)


@pytest.mark.parametrize(
    "value",
    [
        [0.5, -0.5],
        (0.5, -0.5),
        np.array([0.5, -0.5], dtype=np.float16),
        np.array([[0.5], [-0.5]]),  # flattened
        np.array([np.float32(0.5), -0.5], dtype=object),
        torch.tensor([0.5, -0.5], dtype=torch.bfloat16),
        torch.tensor([0.5, -0.5], requires_grad=True),
        (x for x in [0.5, -0.5]),
        [torch.tensor(0.5), np.array([-0.5])],
    ],
    ids=["list", "tuple", "fp16", "2-d", "object", "bf16", "grad", "generator", "0-d-items"],
)
def test_every_accepted_output_becomes_float64(value):
    out = as_advantages(value, "estimator 'x'")
    assert out.dtype == np.float64 and out.tolist() == [0.5, -0.5]


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "NoneType None"),
        ("0.5", "str '0.5'"),
        ({"a": 1}, "dict {'a': 1}"),
        ([0.5, "x"], "list [0.5, 'x']"),
        (np.array([1j]), "ndarray array([0.+1.j])"),
        (torch.tensor([1j]), "Tensor tensor([0.+1.j])"),
        ([[0.5, 0.5]], "list [[0.5, 0.5]]"),
    ],
)
def test_anything_else_is_a_value_error_naming_the_estimator(value, shown):
    with pytest.raises(ValueError) as error:
        as_advantages(value, "estimator 'x' (plugin 'p' (distribution d 1.0))")
    assert str(error.value) == (
        f"estimator 'x' (plugin 'p' (distribution d 1.0)) returned {shown}; advantages must be a sequence, numpy array or torch tensor of real numbers"
    )


def test_the_collector_accepts_generators_and_tensors_and_names_the_estimator_otherwise(registered):
    @registered("h_gen")
    def generated(rewards, **_):
        return (torch.tensor(r - r.mean(), dtype=torch.bfloat16, requires_grad=True) for r in rewards), None

    @registered("h_bad")
    def bad(rewards, **_):
        return [object() for _ in rewards], None

    assert _collect(estimator="h_gen") == [0.5, -0.5]
    with pytest.raises(ValueError, match=r"^estimator 'h_bad' \(user code \(.*bad\)\) for role 'solver', group 0 \(group_id 't1:solver'\) returned object"):
        _collect(estimator="h_bad")


def test_as_groups_takes_any_iterable_of_groups():
    assert len(as_groups(iter([[1.0], [2.0]]), "e")) == 2
    assert len(as_groups(np.zeros((3, 2)), "e")) == 3
    with pytest.raises(ValueError, match="e returned advantages_by_group NoneType None; it must be a sequence with one entry per group"):
        as_groups(None, "e")
