"""Reward shapers in the core: each built-in equal to its source's formula, written out plainly here (loops over groups,
no numpy tricks) on generated groups; the stage's rules (additive, order-free, empty groups, refusals); the collector's
outcome and step level.

Sources: DAPO's soft overlong punishment as verl's DAPO reward manager computes it; prime-rl's length penalty
(``GRPOAlgorithm.score_group`` and ``turn_credit``), its #2702 linear form and its #2265/#2377 efficiency shaping; miles'
group-relative length penalty (its Search-R1 example, #1573).
"""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups, shape_rewards
from rllm_plugins.shaping import register_reward_shaper, resolve_shapers, unregister_reward_shaper


def groups_of(offsets, values):
    return [list(values[a:b]) for a, b in itertools.pairwise(offsets)]


def dapo(rewards, lengths, max_length, buffer, factor):
    return [min(-(n - (max_length - buffer)) / buffer * factor, 0) for n in lengths]


def prime_length_penalty(rewards, offsets, outputs, inputs, turns, w_out, w_in, w_turns):
    out = []
    for r, o, i, t in zip(*(groups_of(offsets, v) for v in (rewards, outputs, inputs, turns)), strict=True):
        pass_rate = sum(r) / len(r)
        max_o, max_i, max_t = (max(x, default=0) or 1 for x in (o, i, t))
        out += [-pass_rate * (w_out * o[k] / max_o + w_in * i[k] / max_i + w_turns * t[k] / max_t) for k in range(len(r))]
    return out


def prime_linear(rewards, offsets, lengths, coef, max_length, gate):
    out = []
    for r, n in zip(groups_of(offsets, rewards), groups_of(offsets, lengths), strict=True):
        mean = sum(r) / len(r)
        out += [-coef * mean * n[k] / max_length * (r[k] if gate else 1.0) for k in range(len(r))]
    return out


def prime_efficiency(rewards, offsets, costs):
    out = []
    for r, c in zip(groups_of(offsets, rewards), groups_of(offsets, costs), strict=True):
        best = max(r)
        correct = [best > 0 and x >= best for x in r]
        mean = sum(cc for cc, ok in zip(c, correct, strict=True) if ok) / max(sum(correct), 1)
        for k in range(len(r)):
            bonus = min(max(1 - c[k] / mean, 0.0), 1.0) if mean > 0 else 0.0
            out.append(r[k] * bonus * correct[k])  # r (1 + bonus) - r
    return out


def miles(rewards, offsets, lengths, threshold=1.0, beta=0.1, cap=0.2, q=0.25, rel=0.1, abs_=16.0, floor=0.8):
    out = []
    for r, n in zip(groups_of(offsets, rewards), groups_of(offsets, lengths), strict=True):
        wins = [k for k in range(len(r)) if r[k] >= threshold]
        terms = [0.0] * len(r)
        if len(wins) >= 2:
            ordered = sorted(n[k] for k in wins)
            position = q * (len(ordered) - 1)  # the linearly interpolated quantile
            low = math.floor(position)
            quantile = ordered[low] + (ordered[min(low + 1, len(ordered) - 1)] - ordered[low]) * (position - low)
            ref = max(1.0, quantile)
            allowed = ref * (1 + rel) + abs_
            for k in wins:
                penalty = min(cap, beta * max(0.0, n[k] - allowed) / ref)
                terms[k] = max(min(floor, r[k]), r[k] - penalty) - r[k]
        out += terms
    return out


def generated(seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 9, rng.integers(1, 6))
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    n = int(offsets[-1])
    binary = bool(seed % 2)
    rewards = rng.integers(0, 2, n).astype(float) if binary else rng.choice([0.0, 0.25, 0.5, 1.0, 1.5], n)
    context = {
        "offsets": offsets,
        "lengths": rng.integers(0, 120, n).astype(float),
        "input_lengths": rng.integers(1, 40, n).astype(float),
        "tool_lengths": rng.integers(0, 30, n).astype(float),
        "turns": rng.integers(1, 5, n).astype(float),
    }
    return rewards, context


SEEDS = range(24)


@pytest.mark.parametrize("seed", SEEDS)
def test_each_builtin_equals_its_sources_formula_on_generated_groups(seed):
    rewards, c = generated(seed)
    o, n, i, tools, turns = c["offsets"], c["lengths"], c["input_lengths"], c["tool_lengths"], c["turns"]
    cases = {
        "dapo_overlong": ({"max_length": 100, "buffer": 30, "factor": 0.7}, dapo(rewards, n, 100, 30, 0.7)),
        "length_penalty": ({}, prime_length_penalty(rewards, o, n, i + tools, turns, 0.25, 0.1, 0.1)),
        "linear_length_penalty": ({"max_length": 128, "coef": 0.3, "gate_by_correctness": bool(seed % 3)}, prime_linear(rewards, o, n, 0.3, 128, seed % 3)),
        "efficiency_bonus": ({"tool_response_weight": 0.5}, prime_efficiency(rewards, o, n + 0.5 * tools)),
        "group_length_penalty": ({"absolute_slack": 4.0, "success_threshold": 1.0}, miles(rewards, o, n, abs_=4.0)),
        "turn_penalty": ({"coef": 0.05, "free_turns": 1}, [-0.05 * max(0, t - 1) for t in turns]),
    }
    for name, (options, want) in cases.items():
        shaped, terms, metrics = shape_rewards(rewards, [{"name": name, **options}], **c)
        np.testing.assert_allclose(terms[name], want, rtol=0, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(shaped, rewards + np.array(want), rtol=0, atol=1e-12, err_msg=name)
        assert metrics[f"shaping/all_groups/{name}/min"] == pytest.approx(min(want))


def test_efficiency_bonus_by_turns_and_the_kimi_free_cases():
    rewards, c = generated(7)
    _, terms, _ = shape_rewards(rewards, [{"name": "efficiency_bonus", "cost": "turns"}], **c)
    np.testing.assert_allclose(terms["efficiency_bonus"], prime_efficiency(rewards, c["offsets"], c["turns"]), atol=1e-12)
    zero = np.zeros(4)  # no correct answer: no bonus (prime-rl leaves the rewards as they are)
    _, terms, _ = shape_rewards(zero, ["efficiency_bonus"], offsets=np.array([0, 4]), lengths=np.array([1.0, 2, 3, 4]))
    assert terms["efficiency_bonus"].tolist() == [0.0] * 4


@pytest.mark.parametrize("seed", range(8))
def test_the_terms_add_up_and_the_order_of_the_list_changes_no_number(seed):
    rewards, c = generated(seed)
    entries = [{"name": "dapo_overlong", "max_length": 90, "buffer": 20}, "length_penalty", {"name": "turn_penalty", "coef": 0.1}]
    shaped, terms, _ = shape_rewards(rewards, entries, **c)
    reverse, _, _ = shape_rewards(rewards, entries[::-1], **c)
    assert shaped.tolist() == reverse.tolist()
    np.testing.assert_allclose(shaped, rewards + np.sum(list(terms.values()), axis=0), rtol=0, atol=1e-12)
    alone = [shape_rewards(rewards, [e], **c)[1] for e in entries]
    for one in alone:
        ((label, term),) = one.items()
        np.testing.assert_array_equal(terms[label], term)


@pytest.mark.parametrize("seed", range(8))
def test_empty_groups_change_no_number(seed):
    rewards, c = generated(seed)
    sizes = np.diff(c["offsets"])
    padded = np.concatenate([[0], np.cumsum(np.insert(np.insert(sizes, 0, 0), len(sizes) // 2 + 1, 0)), [c["offsets"][-1]]])
    for name in ("length_penalty", "efficiency_bonus", "group_length_penalty", {"name": "linear_length_penalty", "max_length": 64}):
        plain = shape_rewards(rewards, [name], **c)[0]
        with_empty = shape_rewards(rewards, [name], **{**c, "offsets": padded})[0]
        np.testing.assert_array_equal(plain, with_empty)


def test_a_repeated_shaper_gets_its_own_label():
    rewards, c = generated(2)
    _, terms, metrics = shape_rewards(rewards, [{"name": "turn_penalty", "coef": 0.1}, {"name": "turn_penalty", "coef": 0.2, "free_turns": 2}], **c)
    assert sorted(terms) == ["turn_penalty", "turn_penalty#2"]
    assert "shaping/all_groups/turn_penalty#2/max" in metrics


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"name": "dapo_overlong", "max_length": 10}, "needs the option(s) ['buffer']"),
        ({"name": "dapo_overlong", "max_length": 10, "buffer": 11}, "buffer must be at most max_length (10), got 11"),
        ({"name": "dapo_overlong", "max_length": 10.5, "buffer": 2}, "max_length must be an int > 0, got float 10.5"),
        ({"name": "length_penalty", "output_weigth": 1.0}, "has no option(s) ['output_weigth']; its options: output_weight, input_weight, turns_weight. "
         "Did you mean 'output_weight' for 'output_weigth'?"),
        ({"name": "turn_penalty", "coef": -1}, "coef must be a finite number >= 0, got int -1"),
        ({"name": "turn_penalty", "coef": 1, "only_successful": "false"}, "only_successful must be True or False, got str 'false'"),
        ({"name": "efficiency_bonus", "cost": "time"}, "cost must be 'tokens' or 'turns', got 'time'"),
        ({"name": "group_length_penalty", "ref_quantile": 2}, "ref_quantile must be a number in [0, 1], got 2"),
        ({"name": "linear_length_penalty", "max_length": 8, "gate_by_correctness": 1}, "gate_by_correctness must be True or False, got int 1"),
        ({"options": {}}, "a mapping entry needs a 'name' key (the reward shaper's name)"),
    ],
)  # fmt: skip
def test_bad_options_are_refused_when_the_config_is_built_naming_the_entry(entry, message):
    with pytest.raises(ValueError, match=re.escape(message)) as caught:
        AlgorithmConfig(reward_shapers=[{"name": "dapo_overlong", "max_length": 8, "buffer": 2}, entry])
    assert str(caught.value).startswith("AlgorithmConfig.reward_shapers[1]")


def test_a_shaper_plugin_that_returns_something_odd_is_refused_naming_it_and_what_to_return():
    bad = {
        "wrong_shape": lambda rewards: np.zeros(rewards.size + 1),
        "nan": lambda rewards: np.full(rewards.size, np.nan),
        "half": lambda rewards: np.zeros(rewards.size, dtype=np.float16),
        "slash": lambda rewards: {"a/b": np.zeros(rewards.size)},
        "text": lambda rewards: "zero",
        "writes": lambda rewards: rewards.__setitem__(0, 1.0),
    }
    messages = {
        "wrong_shape": "returned the term 'test_odd_wrong_shape' with shape (5,) for 4 units; return one number per unit (4,)",
        "nan": "returned nan for unit 0 in the term 'test_odd_nan'; terms must be finite",
        "half": "returned the term 'test_odd_half' as float16, which holds less than float32",
        "slash": "returned a term named 'a/b'; name each term with a non-empty str without '/'",
        "text": "returned str 'zero' for the term 'test_odd_text'; return an array of one number per unit",
        "writes": "assignment destination is read-only",
    }
    for key, fn in bad.items():
        name = f"test_odd_{key}"
        register_reward_shaper(name)(fn)
        try:
            with pytest.raises(ValueError, match=re.escape(messages[key])) as caught:
                resolve_shapers([name], "AlgorithmConfig.reward_shapers")
            assert f"reward shaper '{name}' (user code " in str(caught.value)
        finally:
            unregister_reward_shaper(name)


def test_several_named_terms_are_recorded_one_by_one():
    @register_reward_shaper("test_two_terms")
    def two(rewards, *, lengths):
        return {"long": -0.01 * lengths, "bonus": rewards * 0.5}

    try:
        shaped, terms, metrics = shape_rewards(np.array([1.0, 0.0]), ["test_two_terms"], lengths=np.array([10.0, 20.0]), offsets=np.array([0, 2]))
        assert sorted(terms) == ["test_two_terms/bonus", "test_two_terms/long"]
        assert shaped.tolist() == pytest.approx([1.0 - 0.1 + 0.5, -0.2])
        assert metrics["shaping/all_groups/test_two_terms/long/min"] == pytest.approx(-0.2)
    finally:
        unregister_reward_shaper("test_two_terms")


def group(task, rewards, lengths):
    trajectories = [Trajectory(steps=[Step(prompt_ids=[1, 2, 3], response_ids=[5] * n)], reward=r) for r, n in zip(rewards, lengths, strict=True)]
    return TrajectoryGroup(trajectories, group_id=task)


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "reinforce_plus_plus_baseline", "opo", "rae"])
def test_the_collector_shapes_each_trajectorys_reward_before_the_estimator(estimator):
    rewards, lengths = [[1.0, 0.0, 1.0, 1.0], [0.0, 1.0]], [[10, 3, 7, 12], [8, 2]]
    shapers = [{"name": "dapo_overlong", "max_length": 12, "buffer": 6}]
    shaped_groups = [group(f"q{k}", r, n) for k, (r, n) in enumerate(zip(rewards, lengths, strict=True))]
    metrics = collect_reward_and_advantage_from_trajectory_groups(shaped_groups, AlgorithmConfig(estimator=estimator, reward_shapers=shapers))
    terms = [dapo([], n, 12, 6, 1.0) for n in lengths]
    reference = [group(f"q{k}", [x + t for x, t in zip(r, ts, strict=True)], n) for k, (r, ts, n) in enumerate(zip(rewards, terms, lengths, strict=True))]
    collect_reward_and_advantage_from_trajectory_groups(reference, AlgorithmConfig(estimator=estimator))
    got = [t.steps[0].advantage for g in shaped_groups for t in g.trajectories]
    want = [t.steps[0].advantage for g in reference for t in g.trajectories]
    assert got == pytest.approx(want, abs=1e-12)
    assert metrics["reward/all_groups/mean"] == pytest.approx(np.mean(np.concatenate(rewards)))  # the raw rewards
    assert metrics["shaping/all_groups/dapo_overlong/min"] == pytest.approx(-1.0)


@pytest.mark.parametrize("estimator", ["step_reinforce", "turn_grpo", "gigpo"])
def test_the_collector_adds_a_trajectorys_terms_to_its_outcome_and_its_last_steps_reward(estimator):
    def groups(extra):
        out = []
        for k, (rewards, turns) in enumerate([([1.0, 0.0, 1.0], [3, 1, 2]), ([0.5, 0.5], [2, 4])]):
            trajectories = []
            for t, (r, count) in enumerate(zip(rewards, turns, strict=True)):
                steps = [Step(response_ids=[1] * (s + 1), reward=0.25 * s, observation=f"s{s}") for s in range(count)]
                steps[-1].reward += extra.get((k, t), 0.0)
                trajectories.append(Trajectory(steps=steps, reward=r + extra.get((k, t), 0.0)))
            out.append(TrajectoryGroup(trajectories, group_id=f"q{k}"))
        return out

    shaped = groups({})
    collect_reward_and_advantage_from_trajectory_groups(
        shaped, AlgorithmConfig(estimator=estimator, reward_shapers=[{"name": "turn_penalty", "coef": 0.2, "free_turns": 1}])
    )
    penalty = {(k, t): -0.2 * max(0, count - 1) for k, turns in enumerate([[3, 1, 2], [2, 4]]) for t, count in enumerate(turns)}
    reference = groups(penalty)
    collect_reward_and_advantage_from_trajectory_groups(reference, AlgorithmConfig(estimator=estimator))
    got = [s.advantage for g in shaped for t in g.trajectories for s in t.steps]
    want = [s.advantage for g in reference for t in g.trajectories for s in t.steps]
    assert got == pytest.approx(want, abs=1e-12)


def test_the_collector_refuses_what_it_cannot_give_and_several_named_rewards():
    with pytest.raises(ValueError, match=r"reward shaper 'test_needs_tools' .* needs \['tool_lengths'\], which the collector does not provide"):
        register_reward_shaper("test_needs_tools", requires=("tool_lengths",))(lambda rewards, tool_lengths: -tool_lengths)
        try:
            collect_reward_and_advantage_from_trajectory_groups([group("q", [1.0, 0.0], [3, 4])], AlgorithmConfig(reward_shapers=["test_needs_tools"]))
        finally:
            unregister_reward_shaper("test_needs_tools")
    named = TrajectoryGroup([Trajectory(steps=[Step()], reward=None, metadata={"rewards": {"a": 1.0, "b": 0.5}}) for _ in range(2)])
    config = AlgorithmConfig(multi_objective_aggregation="normalize_then_sum", reward_shapers=[{"name": "turn_penalty", "coef": 0.1}])
    with pytest.raises(ValueError, match=r"reward shapers add to one reward per unit; these units carry 2 rewards each"):
        collect_reward_and_advantage_from_trajectory_groups([named], config)


def test_the_provenance_line_names_the_shapers_with_their_options():
    groups = [group("q", [1.0, 0.0], [3, 4])]
    metrics = collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(reward_shapers=[{"name": "turn_penalty", "coef": 0.1}]))
    assert '; shapers turn_penalty{"coef":0.1} [built-in]; transforms none;' in metrics.provenance_line
    assert metrics.provenance["shapers"] == [{"name": "turn_penalty", "options": {"coef": 0.1}, "source": "built-in", "plugin": "builtin",
                                              "distribution": "rllm-plugins", "version": metrics.provenance["rllm_plugins"]}]  # fmt: skip


def test_normalize_then_sum_with_one_reward_per_trajectory_shapes_it_as_sum_then_normalize_does():
    def run(aggregation, extra=()):
        groups = [group("q", [1.0, 0.0, 1.0, 1.0], [3, 9, 6, 12])]
        shapers = [{"name": "dapo_overlong", "max_length": 12, "buffer": 6}] if not extra else []
        config = AlgorithmConfig(estimator="grpo", multi_objective_aggregation=aggregation, reward_shapers=shapers)
        if extra:
            for t, term in zip(groups[0].trajectories, extra, strict=True):
                t.reward += term
        collect_reward_and_advantage_from_trajectory_groups(groups, config)
        return [t.steps[0].advantage for t in groups[0].trajectories]

    terms = dapo([], [3, 9, 6, 12], 12, 6, 1.0)
    assert run("normalize_then_sum") == pytest.approx(run("normalize_then_sum", terms), abs=1e-12)
