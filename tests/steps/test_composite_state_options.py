"""A stateful term's options are recorded and checked as the estimator's own: ``composite`` with an ``rae`` term resumes
under the options that made its state, or under changed ones only when accepted (docs/running_baselines.md)."""

from __future__ import annotations

import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups


def groups(rewards):
    return [TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1])], reward=r) for r in rewards], group_id="task:solver")]


def composite(decay):
    return AlgorithmConfig(estimator="composite", estimator_kwargs={"terms": [["grpo", 0.5], ["rae", 0.5, {"decay": decay}]]})


def test_the_state_records_the_terms_and_a_resume_under_another_decay_is_refused_like_rae_alone():
    first = composite(0.5)
    collect_reward_and_advantage_from_trajectory_groups(groups([1.0, 0.0]), first)
    saved = first.state_dict()
    assert saved["options"]["composite"]["terms"] == [["grpo", 0.5], ["rae", 0.5, {"decay": 0.5}]]
    resumed = composite(0.9)
    resumed.load_state_dict(saved)
    with pytest.raises(ValueError, match=r"estimator 'composite': option 'terms' is .* now, but the state .* was made with terms="):
        collect_reward_and_advantage_from_trajectory_groups(groups([1.0, 0.5]), resumed)
    assert resumed.state_dict() == saved  # refused before any change
    alone = AlgorithmConfig(estimator="rae", estimator_kwargs={"decay": 0.5})
    collect_reward_and_advantage_from_trajectory_groups(groups([1.0, 0.0]), alone)
    other = AlgorithmConfig(estimator="rae", estimator_kwargs={"decay": 0.9})
    other.load_state_dict(alone.state_dict())
    with pytest.raises(ValueError, match=r"estimator 'rae': option 'decay' is 0.9 now"):
        collect_reward_and_advantage_from_trajectory_groups(groups([1.0, 0.5]), other)


def test_an_accepted_change_continues_the_state_and_the_next_state_records_the_new_terms():
    first = composite(0.5)
    collect_reward_and_advantage_from_trajectory_groups(groups([1.0, 0.0]), first)
    baseline = first.state_dict()["estimators"]["composite"]["solver"]["terms"]["1:rae"]["baseline"]
    resumed = composite(0.9)
    resumed.load_state_dict(first.state_dict(), accept_changed_options=["terms"])
    collect_reward_and_advantage_from_trajectory_groups(groups([1.0, 1.0]), resumed)
    state = resumed.state_dict()
    assert state["options"]["composite"]["terms"][1] == ["rae", 0.5, {"decay": 0.9}]
    assert state["estimators"]["composite"]["solver"]["terms"]["1:rae"]["baseline"] == pytest.approx(0.9 * (0.9 * baseline + 0.1) + 0.1)
