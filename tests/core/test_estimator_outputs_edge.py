"""Edges of the one output rule (``rllm_plugins.outputs``), through the collector.

Before: a set was accepted in hash order (advantages swapped between trajectories), a masked
array wrote ``None`` into ``step.advantage``, a 0-d ``advantages_by_group`` or a huge int raised
TypeError/OverflowError, a ``np.bool_`` was refused while ``True`` was accepted, and a sparse
tensor raised TypeError.
"""

from __future__ import annotations

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, collect_reward_and_advantage_from_trajectory_groups, register_rllm_adv_estimator, unregister_rllm_adv_estimator
from rllm_plugins.outputs import as_advantages
from rllm_plugins.types import Step, Trajectory, TrajectoryGroup

torch = pytest.importorskip("torch")  # the core without torch (the Python 3.10 and 3.12 cells of make compat) skips this file

NAME = "edge_outputs"
PROVIDER = "user code (tests.core.test_estimator_outputs_edge.returning.<locals>.register.<locals>.estimator)"
WHO = f"estimator {NAME!r} ({PROVIDER}) for role 'all_groups'"


def _groups() -> list[TrajectoryGroup]:
    return [TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1])], reward=r) for r in (1.0, 0.0)], group_id="g")]


@pytest.fixture
def returning():
    """Register an estimator returning ``make(centred rewards)`` for each group (or ``whole`` as advantages_by_group)."""

    def register(make=None, whole=None):
        @register_rllm_adv_estimator(NAME)
        def estimator(rewards, **_):
            out = whole if whole is not None else [make(r - r.mean()) for r in rewards]
            return out, out

    yield register
    unregister_rllm_adv_estimator(NAME)


def _run(groups):
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator=NAME))
    return [t.steps[0].advantage for t in groups[0].trajectories]


def test_a_set_is_refused_it_has_no_order(returning):
    returning(lambda c: set(c.tolist()))
    groups = _groups()
    with pytest.raises(ValueError, match=r"returned set \{.*\}; advantages must be a sequence"):
        _run(groups)
    assert [t.steps[0].advantage for t in groups[0].trajectories] == [None, None]


def test_a_masked_entry_is_not_written_as_none(returning):
    returning(lambda c: np.ma.array(c, mask=[False, True]))
    with pytest.raises(ValueError, match=r"trajectory 1 got advantage nan; advantages must be finite"):
        _run(_groups())


def test_a_masked_array_without_masked_entries_is_its_values(returning):
    returning(lambda c: np.ma.array(c, mask=[False, False]))
    assert _run(_groups()) == [0.5, -0.5]


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_a_matrix_is_its_values(returning):
    returning(lambda c: np.asmatrix(c))
    assert _run(_groups()) == [0.5, -0.5]


def test_a_zero_d_advantages_by_group_names_the_estimator(returning):
    returning(whole=np.array(1.0))
    with pytest.raises(ValueError) as error:
        _run(_groups())
    assert str(error.value) == f"{WHO} returned advantages_by_group ndarray array(1.); it must be a sequence with one entry per group"


def test_numpy_bools_count_like_python_bools(returning):
    returning(lambda c: [np.True_, np.False_])
    assert _run(_groups()) == [1.0, 0.0]
    assert as_advantages(np.True_, "x").tolist() == as_advantages(True, "x").tolist() == [1.0]


def test_an_int_beyond_the_float_range_names_the_estimator():
    with pytest.raises(ValueError, match=r"^x returned list \[1000.*; advantages must be a sequence"):
        as_advantages([10**400], "x")


def test_a_sparse_tensor_is_its_dense_values_and_a_meta_tensor_is_refused():
    assert as_advantages(torch.tensor([0.5, 0.0, -0.5]).to_sparse(), "x").tolist() == [0.5, 0.0, -0.5]
    with pytest.raises(ValueError, match=r"^x returned Tensor tensor\(\.\.\., device='meta'"):
        as_advantages(torch.empty(2, device="meta"), "x")


@pytest.mark.parametrize(
    "group",
    [torch.tensor([1.0, 0.0], dtype=torch.bfloat16), torch.tensor([1.0, 0.0], requires_grad=True), torch.tensor([1.0, 0.0], dtype=torch.float16)],
    ids=["bf16", "requires-grad", "fp16"],
)
def test_list_form_rewards_may_be_any_real_tensor(group):
    # before: bf16 -> "rewards must be numbers", requires_grad -> RuntimeError
    from rllm_plugins.estimators import calculate_grpo_advantages

    advantages, _ = calculate_grpo_advantages([group])
    np.testing.assert_allclose(advantages[0], [0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6)])
