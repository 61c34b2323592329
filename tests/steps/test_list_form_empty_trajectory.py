"""The list form refuses a trajectory without steps, as the collector does (before, it gave it no advantage silently)."""

from __future__ import annotations

import pytest

from rllm_plugins.estimators import calculate_gigpo_advantages, calculate_step_reinforce_advantages


def test_the_list_form_refuses_a_trajectory_without_steps_as_the_collector_does():
    with pytest.raises(ValueError, match=r"group 0, trajectory 1: the trajectory has no steps; a step-level estimator gives one advantage per step"):
        calculate_gigpo_advantages([[1.0, 0.0]], [[[1.0], []]], [[["s"], []]])
    with pytest.raises(ValueError, match=r"group 1, trajectory 0: the trajectory has no steps"):
        calculate_step_reinforce_advantages([[1.0], [0.0]], [[[1.0]], [[]]])
