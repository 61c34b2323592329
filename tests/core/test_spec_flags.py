"""``AdvEstimatorSpec``'s flags are bools: the str ``"false"`` is truthy, so it is refused rather than read as True."""

from __future__ import annotations

import numpy as np
import pytest

from rllm_plugins import AdvEstimatorSpec, register_rllm_adv_estimator
from rllm_plugins.steps import StepBatch


def _outcome(rewards, **_):
    return rewards, rewards


def _steps(batch: StepBatch, /, **_):
    return np.zeros(batch.num_steps)


@pytest.mark.parametrize("value", ["false", "False", 0, 1, None, 1.0])
def test_needs_anchors_must_be_a_bool(value):
    with pytest.raises(ValueError) as error:
        AdvEstimatorSpec("flagged", batched=_steps, level="step", needs_anchors=value)
    assert str(error.value) == f"estimator 'flagged': needs_anchors must be a bool (True or False), got {type(value).__name__} {value!r}"


@pytest.mark.parametrize("value", ["false", 0, None])
def test_group_order_invariant_must_be_a_bool(value):
    with pytest.raises(ValueError, match=r"estimator 'flagged': group_order_invariant must be a bool \(True or False\), got"):
        AdvEstimatorSpec("flagged", fn=_outcome, group_order_invariant=value)


def test_the_decorator_refuses_a_str_flag_too():
    with pytest.raises(ValueError, match="needs_anchors must be a bool"):
        register_rllm_adv_estimator("flagged", level="step", needs_anchors="false")(_steps)


def test_numpy_bools_are_bools():
    spec = AdvEstimatorSpec("flagged", batched=_steps, level="step", needs_anchors=np.False_, group_order_invariant=np.True_)
    assert spec.needs_anchors is False and spec.group_order_invariant is True
