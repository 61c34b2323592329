"""``rae`` (SPIRAL's running baseline, prime-rl's semantics) and the stateful-estimator API in the core.

The reference is a plain re-statement of prime-rl's ``RAEAlgorithm.score_group`` loop, in exact fractions:
for each trace in order, ``A = r - b[key]`` (``b`` starts at 0), then ``b[key] = decay * b + (1 - decay) * r``.
"""

import json
import random
from fractions import Fraction

import numpy as np
import pytest

from rllm_plugins import (
    AlgorithmConfig,
    Step,
    Trajectory,
    TrajectoryGroup,
    collect_reward_and_advantage_from_trajectory_groups,
    get_estimator_spec,
    register_rllm_adv_estimator,
    unregister_rllm_adv_estimator,
)
from rllm_plugins.estimators.rae import ema_scan, rae
from rllm_plugins.spec import AdvEstimatorSpec
from rllm_plugins.state.store import EstimatorState


def reference_rae(traces, baselines, decay):
    """prime-rl's loop: traces = [(key, reward)] in scan order; ``baselines`` (key -> Fraction) is updated in place."""
    advantages = []
    for key, reward in traces:
        baseline = baselines.get(key, Fraction(0))
        advantages.append(reward - baseline)
        baselines[key] = decay * baseline + (1 - decay) * reward
    return advantages


def group(task, role, rewards):
    return TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1, 2]), Step(response_ids=[3])], reward=float(r)) for r in rewards], group_id=f"{task}:{role}")


def random_batch(rng, roles=("solver", "judge", "critic"), tasks=6):
    """Groups of 1-4 trajectories, roles interleaved, rewards multiples of 1/8 (exact in binary)."""
    groups = []
    for _ in range(rng.randint(1, 8)):
        size = rng.choice([1, 1, 2, 3, 4])
        groups.append(group(f"t{rng.randrange(tasks)}", rng.choice(roles), [Fraction(rng.randint(-8, 8), 8) for _ in range(size)]))
    return groups


def traces_of(groups, key_by):
    """Each trajectory of each role, in the batch's order: [(role, key, reward)]."""
    return [(g.group_role, g.group_role if key_by == "role" else g.task_id, Fraction(t.reward)) for g in groups for t in g.trajectories]


@pytest.mark.parametrize("key_by", ["role", "task"])
@pytest.mark.parametrize("decay", [Fraction(19, 20), Fraction(1, 2), Fraction(0)])
def test_rae_equals_prime_rl_loop_over_calls_roles_and_groups_of_one(key_by, decay):
    rng = random.Random(7)
    config = AlgorithmConfig(estimator="rae", estimator_kwargs={"decay": float(decay), "key_by": key_by})
    baselines = {}  # (role, key) -> Fraction: the state is per role, keyed further by task
    for _ in range(12):
        groups = random_batch(rng)
        collect_reward_and_advantage_from_trajectory_groups(groups, config)
        got = [step.advantage for g in groups for t in g.trajectories for step in t.steps[:1]]
        traces = [((role, key), r) for role, key, r in traces_of(groups, key_by)]
        expected = reference_rae(traces, baselines, decay)
        np.testing.assert_allclose(got, [float(a) for a in expected], rtol=0, atol=1e-12)
        assert all(s.advantage == t.steps[0].advantage for g in groups for t in g.trajectories for s in t.steps)  # broadcast


def test_decay_default_is_095_and_baseline_starts_at_zero():
    assert rae(np.array([1.0, 1.0]), np.array([0, 1, 2]), state={})[0].tolist() == pytest.approx([1.0, 0.95])


def test_long_scans_are_exact_past_the_chunk_length():
    """decay 0.5 and 1e-9: d**-q would overflow a single cumulative sum; the chunked scan equals the loop."""
    rng = np.random.default_rng(0)
    values = rng.integers(-4, 5, size=5000) / 4.0
    codes = rng.integers(0, 3, size=5000)
    for decay in (0.5, 1e-9, 0.999):
        before, final = ema_scan(values, codes, np.array([0.25, -1.0, 0.0]), decay)
        b = [0.25, -1.0, 0.0]
        expected = []
        for r, k in zip(values.tolist(), codes.tolist(), strict=True):
            expected.append(b[k])
            b[k] = decay * b[k] + (1 - decay) * r
        np.testing.assert_allclose(before, expected, rtol=0, atol=1e-9)
        np.testing.assert_allclose(final, b, rtol=0, atol=1e-9)


@pytest.mark.parametrize("decay", [0.0, 1e-9, 0.5, 0.95])
def test_one_key_scans_as_one_present_key_of_several_does_bit_for_bit(decay):
    """The role's scan (one key) skips the grouping; it equals the grouped scan where only that key occurs, and the loop."""
    values = np.random.default_rng(1).integers(-4, 5, size=3000) / 4.0
    alone, alone_final = ema_scan(values, np.zeros(values.size, dtype=np.int64), np.array([0.25]), decay)
    grouped, grouped_final = ema_scan(values, np.zeros(values.size, dtype=np.int64), np.array([0.25, 7.0]), decay)
    assert alone.tobytes() == grouped.tobytes() and alone_final[0] == grouped_final[0] and grouped_final[1] == 7.0
    b, expected = 0.25, []
    for r in values.tolist():
        expected.append(b)
        b = decay * b + (1 - decay) * r
    np.testing.assert_allclose(alone, expected, rtol=0, atol=1e-9)
    assert alone_final[0] == pytest.approx(b, abs=1e-9)


def test_same_config_continues_and_a_fresh_config_starts_from_zero():
    config = AlgorithmConfig(estimator="rae")
    collect_reward_and_advantage_from_trajectory_groups([group("q", "a", [1.0])], config)
    second = [group("q", "a", [1.0])]
    collect_reward_and_advantage_from_trajectory_groups(second, config)
    assert second[0].trajectories[0].steps[0].advantage == pytest.approx(0.95)
    fresh = [group("q", "a", [1.0])]
    collect_reward_and_advantage_from_trajectory_groups(fresh, AlgorithmConfig(estimator="rae"))
    assert fresh[0].trajectories[0].steps[0].advantage == 1.0


def test_state_dict_round_trips_through_json_and_continues_identically():
    rng = random.Random(3)
    batches = [random_batch(rng) for _ in range(6)]
    straight = AlgorithmConfig(estimator="rae", estimator_map={"judge": "grpo"})
    for b in batches:
        collect_reward_and_advantage_from_trajectory_groups(b, straight)
    straight_last = [t.steps[0].advantage for g in batches[-1] for t in g.trajectories]

    first = AlgorithmConfig(estimator="rae", estimator_map={"judge": "grpo"})
    for b in batches[:3]:
        collect_reward_and_advantage_from_trajectory_groups(b, first)
    saved = json.dumps(first.state_dict())
    resumed = AlgorithmConfig(estimator="rae", estimator_map={"judge": "grpo"})
    resumed.load_state_dict(json.loads(saved))
    for b in batches[3:]:
        collect_reward_and_advantage_from_trajectory_groups(b, resumed)
    assert [t.steps[0].advantage for g in batches[-1] for t in g.trajectories] == straight_last
    assert resumed.state_dict() == straight.state_dict()
    assert "judge" not in resumed.state_dict()["estimators"]["rae"]  # judges use grpo: no state


def test_a_failing_role_leaves_every_state_and_advantage_unchanged():
    config = AlgorithmConfig(estimator="rae", estimator_map={"judge": "grpo"})
    collect_reward_and_advantage_from_trajectory_groups([group("q", "solver", [1.0])], config)
    before = config.state_dict()
    bad = [group("q", "solver", [1.0]), group("q", "judge", [0.0])]
    bad[1].trajectories[0].reward = None
    with pytest.raises(ValueError, match="reward is None"):
        collect_reward_and_advantage_from_trajectory_groups(bad, config)
    assert config.state_dict() == before
    assert bad[0].trajectories[0].steps[0].advantage is None


def test_a_raising_stateful_plugin_and_a_mutating_one_leave_the_state_unchanged():
    calls = []

    @register_rllm_adv_estimator("count_then_fail", stateful=True)
    def count_then_fail(rewards, state, **_):
        state["n"] = state.get("n", 0) + 1  # mutates its copy, then fails on the second call
        calls.append(dict(state))
        if state["n"] > 1:
            raise RuntimeError("boom")
        return ([np.zeros(len(r)) for r in rewards], [np.zeros(len(r)) for r in rewards]), state

    try:
        config = AlgorithmConfig(estimator="count_then_fail")
        collect_reward_and_advantage_from_trajectory_groups([group("q", "a", [1.0])], config)
        assert config.state_dict()["estimators"] == {"count_then_fail": {"a": {"n": 1}}}
        with pytest.raises(RuntimeError, match="boom"):
            collect_reward_and_advantage_from_trajectory_groups([group("q", "a", [1.0])], config)
        assert config.state_dict()["estimators"] == {"count_then_fail": {"a": {"n": 1}}}
        spec = get_estimator_spec("count_then_fail")
        assert spec.stateful
        advantages, new_state = spec.batched_form(np.array([1.0, 2.0]), np.array([0, 2]), state={"n": 0})  # derived batched form
        assert advantages.tolist() == [0.0, 0.0] and new_state == {"n": 1}
    finally:
        unregister_rllm_adv_estimator("count_then_fail")


@pytest.mark.parametrize(
    ("new_state", "message"),
    [([1.0], "must be a mapping"), ({"b": np.float32("nan")}, "finite"), ({1: 0.0}, "keys must be str"), ({"b": object()}, "plain data")],
)
def test_a_stateful_estimator_returning_an_odd_state_is_refused_and_nothing_changes(new_state, message):
    @register_rllm_adv_estimator("odd_state", stateful=True)
    def odd_state(rewards, state, **_):
        return ([np.zeros(len(r)) for r in rewards], [np.zeros(len(r)) for r in rewards]), new_state

    try:
        config = AlgorithmConfig(estimator="odd_state")
        groups = [group("q", "a", [1.0])]
        with pytest.raises(ValueError, match=message) as error:
            collect_reward_and_advantage_from_trajectory_groups(groups, config)
        assert "odd_state" in str(error.value)
        assert not config.estimator_state and groups[0].trajectories[0].steps[0].advantage is None
    finally:
        unregister_rllm_adv_estimator("odd_state")


def test_a_stateful_estimator_not_returning_a_pair_is_named():
    @register_rllm_adv_estimator("no_pair", stateful=True)
    def no_pair(rewards, state, **_):
        return [np.zeros(len(r)) for r in rewards]

    try:
        with pytest.raises(ValueError, match=r"'no_pair'.*stateful and must return"):
            collect_reward_and_advantage_from_trajectory_groups([group("q", "a", [1.0, 2.0, 3.0])], AlgorithmConfig(estimator="no_pair"))
    finally:
        unregister_rllm_adv_estimator("no_pair")


def test_stateful_spec_needs_a_state_parameter_and_outcome_level():
    with pytest.raises(ValueError, match="must take a `state` keyword"):
        AdvEstimatorSpec("nostate", batched=lambda values, offsets, **kw: (values, {}), stateful=True)
    with pytest.raises(ValueError, match="level='outcome' only"):
        AdvEstimatorSpec("stepstate", batched=lambda values, offsets, state=None: (values, {}), stateful=True, level="step")
    with pytest.raises(TypeError, match="stateful must be a bool"):
        AdvEstimatorSpec("strstate", batched=lambda values, offsets, state=None: (values, {}), stateful="yes")


def test_plain_estimators_are_unchanged_and_keep_no_state():
    spec = get_estimator_spec("grpo")
    assert spec.stateful is False
    config = AlgorithmConfig(estimator="grpo")
    collect_reward_and_advantage_from_trajectory_groups([group("q", "a", [1.0, 0.0])], config)
    assert config.state_dict() == {"format": 2, "estimators": {}, "options": {}, "provenance": {}}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"decay": 1.0}, "0 <= decay < 1"),
        ({"decay": -0.1}, "0 <= decay < 1"),
        ({"decay": "0.9"}, "decay"),
        ({"decay": True}, "decay"),
        ({"key_by": "agent"}, "key_by"),
        ({"decey": 0.9}, "Did you mean 'decay'"),
    ],
)
def test_bad_rae_options_are_refused_before_anything_runs(kwargs, message):
    config = AlgorithmConfig(estimator="rae", estimator_kwargs=kwargs)
    with pytest.raises(ValueError, match=message):
        collect_reward_and_advantage_from_trajectory_groups([group("q", "a", [1.0])], config)
    assert not config.estimator_state


def test_key_by_task_needs_task_ids():
    with pytest.raises(ValueError, match="empty task id"):
        collect_reward_and_advantage_from_trajectory_groups(
            [TrajectoryGroup([Trajectory(steps=[Step()], reward=1.0)])], AlgorithmConfig(estimator="rae", estimator_kwargs={"key_by": "task"})
        )
    with pytest.raises(ValueError, match="needs a stable task id"):
        rae(np.array([1.0]), np.array([0, 1]), state={}, key_by="task")
    with pytest.raises(ValueError, match="task ids must be non-empty str"):
        rae(np.array([1.0]), np.array([0, 1]), state={}, key_by="task", task_ids=np.array([3], dtype=object))


def test_list_and_batched_forms_agree_and_rewards_of_any_dtype_work():
    spec = get_estimator_spec("rae")
    (by_group, _), state = spec.list_form([np.array([1, 0], dtype=np.int64), np.array([True])], state={"baseline": 0.5}, decay=0.5)
    batched, state2 = spec.batched_form(np.array([1.0, 0.0, 1.0]), np.array([0, 2, 3]), state={"baseline": 0.5}, decay=0.5)
    assert np.concatenate(by_group).tolist() == batched.tolist() == [0.5, -0.75, 0.625]
    assert state == state2 == {"baseline": 0.6875}
    (empty, _), unchanged = spec.list_form([], state={"baseline": 0.5})
    assert empty == [] and unchanged == {"baseline": 0.5}


def test_estimator_state_load_refuses_malformed_input():
    store = EstimatorState()
    with pytest.raises(ValueError, match="expected"):
        store.load_state_dict({"rae": {}})
    with pytest.raises(ValueError, match="plain data"):
        store.load_state_dict({"format": 1, "estimators": {"rae": {"a": {"baseline": {1, 2}}}}})


@pytest.mark.parametrize("n", [500, 3000])  # the row-by-row scan and the vectorised one
def test_key_by_task_equals_the_loop_from_a_state_at_every_batch_size(n):
    rng = np.random.default_rng(n)
    values = rng.integers(-4, 5, size=n) / 4.0
    ids = [f"task{i}" for i in rng.integers(0, 60, size=n)]
    known = {f"task{i}": float(i) / 8 for i in range(0, 80, 3)}  # some of the batch's tasks, and others
    got, new_state = rae(values, np.arange(n + 1), state={"task_baselines": known}, decay=0.9, key_by="task", task_ids=np.array(ids, dtype=object))
    baselines, expected = dict(known), []
    for r, task in zip(values.tolist(), ids, strict=True):
        b = baselines.get(task, 0.0)
        expected.append(r - b)
        baselines[task] = 0.9 * b + 0.1 * r
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    returned = dict(new_state["task_baselines"])
    assert set(returned) == set(baselines)  # the state's tasks and the batch's
    assert returned == pytest.approx(baselines, abs=1e-12)


@pytest.mark.parametrize("n", [500, 3000])
def test_key_by_task_names_a_bad_task_id_at_every_batch_size(n):
    ids: list[object] = ["a"] * n
    ids[n - 2] = 7
    with pytest.raises(ValueError, match=rf"rae: key_by='task': trajectory {n - 2} has task id 7 \(int\); task ids must be non-empty str"):
        rae(np.zeros(n), np.arange(n + 1), state={}, key_by="task", task_ids=ids)
    ids[n - 2] = ""
    with pytest.raises(ValueError, match=rf"rae: key_by='task': trajectory {n - 2} has an empty task id"):
        rae(np.zeros(n), np.arange(n + 1), state={}, key_by="task", task_ids=ids)
