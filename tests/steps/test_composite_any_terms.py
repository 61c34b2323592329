"""composite of any terms: anchored, length-weighted, config-reading and stateful terms get what they get alone.

The references are plain loops written here (GiGPO, GRPO, OPO, PKPO's ±1/12, RAE's running baseline),
or the term run alone through the same collector.
"""

from __future__ import annotations

import copy
import statistics

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.estimators import BUILTIN_SPECS, calculate_composite_advantages, check_group_size
from rllm_plugins.registry import get_estimator_spec
from rllm_plugins.state.store import EstimatorState

EPS = 1e-6

# two task groups; per trajectory: its steps as (anchor state, step reward, response tokens)
EPISODES = [
    [
        [("start", 0.0, 3), ("door", 1.0, 2)],
        [("start", 0.0, 5), ("hall", 0.0, 1), ("door", 0.5, 4)],
        [("start", 1.0, 2)],
    ],
    [
        [("s", 0.25, 6), ("t", 0.0, 1)],
        [("s", 0.0, 2), ("t", 1.0, 3)],
    ],
]


def groups_of(episodes=EPISODES, role="solver"):
    """TrajectoryGroups whose outcome is the sum of the step rewards, anchors in Step.observation, lengths in response_ids."""
    out = []
    for g, group in enumerate(episodes):
        trajectories = [
            Trajectory(steps=[Step(observation=a, reward=r, response_ids=[7] * n) for a, r, n in traj], reward=sum(r for _, r, _ in traj)) for traj in group
        ]
        out.append(TrajectoryGroup(trajectories, group_id=f"task{g}:{role}"))
    return out


def step_advantages(groups):
    return [[[s.advantage for s in t.steps] for t in g.trajectories] for g in groups]


def plain_grpo(xs, eps=EPS):
    mean, sd = (0.0, 1.0) if len(xs) == 1 else (statistics.fmean(xs), statistics.pstdev(xs))
    return [(x - mean) / (sd + eps) for x in xs]


def plain_gigpo(group, gamma, w=1.0):
    """GiGPO of one task group: episode GRPO of the outcomes + w * (G - mean_a G) / (std_a G + eps) within equal anchors."""
    outcomes = [sum(r for _, r, _ in traj) for traj in group]
    episode = plain_grpo(outcomes)
    returns = []
    for traj in group:
        g, out = 0.0, []
        for _, r, _ in reversed(traj):
            g = r + gamma * g
            out.append(g)
        returns.append(out[::-1])
    by_anchor = {}
    for i, traj in enumerate(group):
        for t, (a, _, _) in enumerate(traj):
            by_anchor.setdefault(a, []).append(returns[i][t])
    result = []
    for i, traj in enumerate(group):
        row = []
        for t, (a, _, _) in enumerate(traj):
            pool = by_anchor[a]
            step = 0.0 if len(pool) == 1 else (returns[i][t] - statistics.fmean(pool)) / (statistics.pstdev(pool) + EPS)
            row.append(episode[i] + w * step)
        result.append(row)
    return result


def plain_opo(group):
    outcomes = [sum(r for _, r, _ in traj) for traj in group]
    lengths = [sum(n for _, _, n in traj) for traj in group]
    baseline = sum(x * n for x, n in zip(outcomes, lengths, strict=True)) / sum(lengths) if len(group) > 1 else 0.0
    return [x - baseline for x in outcomes]


def collect(terms, *, config=None, episodes=EPISODES, **fields):
    config = config or AlgorithmConfig(estimator="composite", estimator_kwargs={"terms": terms}, **fields)
    groups = groups_of(episodes)
    collect_reward_and_advantage_from_trajectory_groups(groups, config)
    return step_advantages(groups)


def test_gigpo_with_its_gamma_plus_twice_grpo_is_the_weighted_sum_of_plain_gigpo_and_grpo():
    got = collect([["gigpo", 1.0, {"gamma": 0.9}], ["grpo", 2.0]])
    for g, group in enumerate(EPISODES):
        gigpo = plain_gigpo(group, gamma=0.9)
        grpo = plain_grpo([sum(r for _, r, _ in traj) for traj in group])
        want = [[gigpo[i][t] + 2.0 * grpo[i] for t in range(len(traj))] for i, traj in enumerate(group)]
        assert got[g] == [pytest.approx(row, rel=1e-12, abs=1e-12) for row in want]


def test_the_list_form_takes_anchor_states_for_an_anchored_term():
    rewards = [[sum(r for _, r, _ in traj) for traj in group] for group in EPISODES]
    step_rewards = [[[r for _, r, _ in traj] for traj in group] for group in EPISODES]
    anchors = [[[a for a, _, _ in traj] for traj in group] for group in EPISODES]
    got, _ = calculate_composite_advantages(rewards, step_rewards, anchors, terms=[["gigpo", 1.0, {"gamma": 0.9}], ["grpo", 2.0]])
    assert [[t.tolist() for t in g] for g in got] == collect([["gigpo", 1.0, {"gamma": 0.9}], ["grpo", 2.0]])


def test_composite_declares_what_its_terms_need():
    from rllm_plugins.needs import Needs, needs_of

    spec = get_estimator_spec("composite")
    assert needs_of(spec, {"terms": [["grpo", 1.0]]}) == Needs()
    assert needs_of(spec, {"terms": [["grpo", 1.0], ["gigpo", 1.0]]}) == Needs(anchors=True)
    assert needs_of(spec, {"terms": [["opo", 1.0]]}) == Needs(lengths=True)
    assert needs_of(spec, {"terms": [["rae", 1.0, {"decay": 0.5}]]}) == Needs(state=True)


def test_a_pkpo_term_reads_pass_at_k_from_the_algorithm_config():
    """PR #743's example: n = 4, two successes, k = 2 gives ±1/12 (k = 1 would give ±1/8)."""
    episodes = [[[("x", r, 1)] for r in (1.0, 0.0, 1.0, 0.0)]]
    got = collect([["pkpo", 1.0]], episodes=episodes, pass_at_k=2)
    assert [t[0] for t in got[0]] == pytest.approx([1 / 12, -1 / 12, 1 / 12, -1 / 12], rel=1e-12)
    assert [t[0] for t in collect([["pkpo", 1.0, {"k": 1}]], episodes=episodes, pass_at_k=1)[0]] == pytest.approx([1 / 8, -1 / 8, 1 / 8, -1 / 8])


@pytest.mark.parametrize("name", ["opo", "minus_length_weighted_mean", "verl_reinforce_plus_plus_baseline"])
def test_a_length_weighted_term_gets_the_response_lengths(name):
    got = collect([[name, 1.0], ["grpo", 0.5]])
    alone = collect(None, config=AlgorithmConfig(estimator=name))
    for g, group in enumerate(EPISODES):
        grpo = plain_grpo([sum(r for _, r, _ in traj) for traj in group])
        assert got[g] == [pytest.approx([a + 0.5 * grpo[i] for a in row], rel=1e-12, abs=1e-12) for i, row in enumerate(alone[g])]


def test_an_opo_term_is_the_plain_length_weighted_baseline():
    got = collect([["opo", 3.0]])
    for g, group in enumerate(EPISODES):
        want = plain_opo(group)
        assert got[g] == [pytest.approx([3.0 * want[i]] * len(traj), rel=1e-12, abs=1e-12) for i, traj in enumerate(group)]


def test_a_length_term_without_lengths_is_refused_naming_the_term():
    with pytest.raises(ValueError, match=r"estimator 'composite', term 1 \('opo'\) needs the response length of every trajectory"):
        calculate_composite_advantages([[1.0, 0.0]], [[[1.0], [0.0]]], terms=[["grpo", 1.0], ["opo", 1.0]])
    got, _ = calculate_composite_advantages([[1.0, 0.0]], [[[1.0], [0.0]]], terms=[["opo", 1.0]], lengths=[3.0, 1.0])
    assert [t.tolist() for t in got[0]] == [[0.25], [-0.75]]  # baseline (3 * 1 + 1 * 0) / 4


def plain_rae(rewards_by_call, decay):
    """RAE (key_by role): A = r - b, then b <- decay * b + (1 - decay) * r, in scan order, across calls."""
    b, out = 0.0, []
    for rewards in rewards_by_call:
        call = []
        for r in rewards:
            call.append(r - b)
            b = decay * b + (1 - decay) * r
        out.append(call)
    return out, b


CALLS = [EPISODES, [[[("a", 1.0, 1)], [("a", 0.0, 2)]]], [[[("a", 0.5, 1)], [("b", 2.0, 1)], [("c", 0.0, 1)]]]]


def test_a_stateful_term_keeps_its_state_across_calls_inside_the_composite_state():
    config = AlgorithmConfig(estimator="composite", estimator_kwargs={"terms": [["grpo", 0.5], ["rae", 2.0, {"decay": 0.5}]]})
    got = [collect(None, config=config, episodes=episodes) for episodes in CALLS]
    rewards = [[sum(r for _, r, _ in traj) for group in episodes for traj in group] for episodes in CALLS]
    want, final = plain_rae(rewards, 0.5)
    for c, episodes in enumerate(CALLS):
        flat = iter(want[c])
        for g, group in enumerate(episodes):
            grpo = plain_grpo([sum(r for _, r, _ in traj) for traj in group])
            for i, traj in enumerate(group):
                assert got[c][g][i] == pytest.approx([0.5 * grpo[i] + 2.0 * next(flat)] * len(traj), rel=1e-12, abs=1e-12)
    assert config.estimator_state.get("composite", "solver") == {"terms": {"1:rae": {"baseline": pytest.approx(final, rel=1e-12)}}}


def test_a_saved_and_restored_composite_state_continues_as_the_uninterrupted_run():
    terms = {"terms": [["rae", 1.0, {"decay": 0.8, "key_by": "task"}], ["rae", -1.0, {"decay": 0.3}]]}
    straight = AlgorithmConfig(estimator="composite", estimator_kwargs=terms)
    uninterrupted = [collect(None, config=straight, episodes=episodes) for episodes in CALLS]
    first = AlgorithmConfig(estimator="composite", estimator_kwargs=terms)
    collect(None, config=first, episodes=CALLS[0])
    resumed = AlgorithmConfig(estimator="composite", estimator_kwargs=terms)
    resumed.estimator_state.load_state_dict(EstimatorState.from_json(first.estimator_state.to_json()).state_dict())
    assert [collect(None, config=resumed, episodes=episodes) for episodes in CALLS[1:]] == uninterrupted[1:]
    assert sorted(straight.estimator_state.get("composite", "solver")["terms"]) == ["0:rae", "1:rae"]


def test_a_stateful_term_called_without_a_state_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match=r"term 0 \('rae'\) is stateful: call composite with state="):
        calculate_composite_advantages([[1.0, 0.0]], [[[1.0], [0.0]]], terms=[["rae", 1.0]])
    (got, _), state = calculate_composite_advantages([[1.0, 0.0]], [[[1.0], [0.0]]], terms=[["rae", 1.0, {"decay": 0.5}]], state={})
    assert [t.tolist() for t in got[0]] == [[1.0], [-0.5]] and state == {"terms": {"0:rae": {"baseline": 0.25}}}


def test_a_term_is_checked_against_the_group_size_as_it_is_alone():
    spec = get_estimator_spec("composite")
    with pytest.raises(ValueError, match=r"estimator 'composite', term 1 \('pkpo'\): estimator 'pkpo': k=4 is not below the group size 4"):
        check_group_size(spec, {"terms": [["grpo", 1.0], ["pkpo", 1.0, {"k": 4}]]}, 4)
    with pytest.raises(ValueError, match=r"term 0 \('passk_training'\): estimator 'passk_training': k=5 is larger than the group size 4"):
        check_group_size(spec, {"terms": [["passk_training", 1.0, {"k": 5}]]}, 4)
    check_group_size(spec, {"terms": [["pkpo", 1.0, {"k": 3}]]}, 4)


SAMPLE_OPTIONS = {"pkpo": {"k": 2}, "passk_training": {"k": 2}, "rae": {"decay": 0.5}, "gigpo": {"gamma": 0.9}}


@pytest.mark.parametrize("name", sorted(spec.name for spec in BUILTIN_SPECS if spec.name != "composite" and not spec.needs_values))
def test_a_one_term_composite_is_the_term_alone(name):
    """For every built-in: the collector's numbers for composite([[e, 1.0, opts]]) equal e(opts), over two calls (state included)."""
    options = SAMPLE_OPTIONS.get(name, {})
    alone = AlgorithmConfig(estimator=name, estimator_kwargs=options, pass_at_k=2 if name == "pkpo" else None)
    wrapped = AlgorithmConfig(estimator="composite", estimator_kwargs={"terms": [[name, 1.0, options]]})
    for episodes in CALLS[:2]:
        assert collect(None, config=wrapped, episodes=episodes) == collect(None, config=alone, episodes=episodes)
    if get_estimator_spec(name).stateful:
        assert wrapped.estimator_state.get("composite", "solver") == {"terms": {f"0:{name}": alone.estimator_state.get(name, "solver")}}


def test_a_failed_call_leaves_the_composite_state_as_it_was():
    config = AlgorithmConfig(estimator="composite", estimator_kwargs={"terms": [["rae", 1.0]]})
    collect(None, config=config)
    before = copy.deepcopy(config.estimator_state.state_dict())
    bad = groups_of([[[("a", 1.0, 1)], [("a", 0.0, 1)]]])
    bad[0].trajectories[1].reward = float("nan")
    with pytest.raises(ValueError, match="rewards must be finite"):
        collect_reward_and_advantage_from_trajectory_groups(bad, config)
    assert config.estimator_state.state_dict() == before
    assert np.isfinite(before["estimators"]["composite"]["solver"]["terms"]["0:rae"]["baseline"])


@pytest.mark.parametrize(
    "terms",
    [
        [["gigpo", 1.0, {"gamma": 0.9}], ["grpo", 2.0]],
        [["opo", 1.0], ["verl_reinforce_plus_plus_baseline", 0.5]],
        [["rae", 1.0, {"key_by": "task"}], ["minus_length_weighted_mean", 2.0], ["gigpo", 1.0]],
    ],
)
def test_the_contract_check_calls_composite_with_what_its_terms_need(terms):
    from rllm_plugins.testing import check_estimator

    report = check_estimator("composite", options={"terms": terms})
    assert report.ok, str(report)
    assert all(v == "pass" or v.startswith("skipped") for v in report.verdicts.values())


def test_a_weight_beyond_the_float_range_is_a_value_error_naming_the_term():
    with pytest.raises(ValueError, match=r"term 0 \('grpo'\): the weight must be a finite number, got int 1000"):
        calculate_composite_advantages([[1.0, 0.0]], [[[1.0], [0.0]]], terms=[["grpo", 10**400]])


def test_a_spec_that_declares_needs_values_needs_values_and_so_does_a_composite_of_it(monkeypatch):
    import importlib
    from types import SimpleNamespace

    from rllm_plugins.needs import Needs, needs_of

    composite_module = importlib.import_module("rllm_plugins.estimators.composite")  # the module, not the function of that name

    valued = SimpleNamespace(name="valued", batched=lambda batch, /, **_: None, fn=None, needs_anchors=False, stateful=False, needs_for=None, needs_values=True)
    assert needs_of(valued) == Needs(values=True)
    monkeypatch.setattr(composite_module, "composite_terms", lambda terms: [("valued", 1.0, {}), ("grpo", 1.0, {})])
    monkeypatch.setattr(composite_module, "get_estimator_spec", lambda name: valued if name == "valued" else get_estimator_spec(name))
    assert composite_module.composite_needs({"terms": "given"}) == Needs(values=True)


@pytest.mark.parametrize("name", sorted(spec.name for spec in BUILTIN_SPECS if spec.needs_values))
def test_a_value_based_term_is_refused_naming_why(name):
    """A value-based estimator's returns are a critic's targets: a weighted sum of terms has none, so composite refuses it."""
    with pytest.raises(ValueError, match=rf"term 0 \('{name}'\) reads a critic's value per step and gives the critic's targets"):
        collect(None, config=AlgorithmConfig(estimator="composite", estimator_kwargs={"terms": [[name, 1.0]]}))


def test_composite_without_terms_is_refused_at_the_cores_config_step_before_any_group_arrives():
    """Before: the collector's option check ran only when estimator_kwargs were given, so composite without terms was refused
    only when a group of its role arrived (TRL's config and verl-check refused it at once)."""
    message = (
        "AlgorithmConfig.estimator_kwargs: estimator 'composite' needs options: terms must be a list of [name, weight] or "
        '[name, weight, {options}], e.g. [["grpo", 0.5], ["rloo", 0.5, {"epsilon": 1e-4}]]; got NoneType None'
    )
    for config in (AlgorithmConfig(estimator="composite"), AlgorithmConfig(estimator="grpo", estimator_map={"judge": "composite"})):
        with pytest.raises(ValueError) as error:
            collect_reward_and_advantage_from_trajectory_groups([], config)
        assert str(error.value) == message
