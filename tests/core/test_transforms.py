"""Advantage transforms in the core: the built-ins against plain re-statements, the entry forms, the collector, errors."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from rllm_plugins import (
    AlgorithmConfig,
    Step,
    Trajectory,
    TrajectoryGroup,
    apply_transforms,
    collect_reward_and_advantage_from_trajectory_groups,
    register_advantage_transform,
)
from rllm_plugins.transforms import unregister_advantage_transform
from rllm_plugins.transforms.contract import check_transform


def plain_clip(values, low, high):
    return [min(high if high is not None else math.inf, max(low if low is not None else -math.inf, v)) for v in values]


def plain_scale(values, positive, negative):
    return [v * positive if v > 0 else v * negative if v < 0 else 0.0 for v in values]


def plain_kl_shaping(adv, mask, logp, ref, coef, estimator):
    """SkyRL #1262: A_t += coef * (mean KL - KL_t) over the batch's model tokens; k1 = logp - ref, k3 = e^(ref-logp) - (ref-logp) - 1."""
    kl = [
        [(lp - r) if estimator == "k1" else (math.exp(r - lp) - (r - lp) - 1) for lp, r in zip(lrow, rrow, strict=True)]
        for lrow, rrow in zip(logp, ref, strict=True)
    ]
    tokens = [(i, j) for i, row in enumerate(mask) for j, m in enumerate(row) if m]
    mean = sum(kl[i][j] for i, j in tokens) / len(tokens)
    return [[a + coef * (mean - kl[i][j]) if mask[i][j] else a for j, a in enumerate(row)] for i, row in enumerate(adv)]


VALUES = [-2.5, -0.3, 0.0, 0.4, 1.7, 3.0]


@pytest.mark.parametrize(("low", "high"), [(-1.0, 1.0), (None, 0.5), (0.0, None), (-0.3, -0.3)])
def test_clip_is_a_plain_clip(low, high):
    options = {k: v for k, v in (("min", low), ("max", high)) if v is not None}
    out, metrics = apply_transforms(np.array(VALUES), [("clip", options)])
    assert out.tolist() == plain_clip(VALUES, low, high)
    changed = sum(a != b for a, b in zip(out.tolist(), VALUES, strict=True)) / len(VALUES)
    assert metrics["transform/all_groups/clip/fraction_changed"] == changed
    assert metrics["transform/all_groups/clip/max"] == max(out.tolist()) and metrics["transform/all_groups/clip/min"] == min(out.tolist())


@pytest.mark.parametrize(("positive", "negative"), [(1.0, 0.5), (2.0, 1.0), (0.0, 1.0), (1.5, 3.0)])
def test_scale_multiplies_by_sign(positive, negative):
    out, metrics = apply_transforms(np.array(VALUES), [{"name": "scale", "positive": positive, "negative": negative}])
    expected = plain_scale(VALUES, positive, negative)
    assert out.tolist() == pytest.approx(expected, abs=0)
    assert metrics["transform/all_groups/scale/mean"] == pytest.approx(sum(expected) / len(expected))
    assert metrics["transform/all_groups/scale/std"] == pytest.approx(float(np.std(expected)))


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_kl_shaping_is_skyrls_formula(estimator):
    rng = np.random.default_rng(7)
    adv = rng.normal(size=(4, 6))
    mask = (rng.random((4, 6)) < 0.7).astype(float)
    mask[:, 0] = 1
    logp, ref = -rng.random((4, 6)) * 2, -rng.random((4, 6)) * 2
    out, metrics = apply_transforms(adv, [("kl_shaping", {"coef": 0.3, "estimator": estimator})], token_level=True, mask=mask, logprobs=logp, ref_logprobs=ref)
    expected = plain_kl_shaping(adv.tolist(), mask.tolist(), logp.tolist(), ref.tolist(), 0.3, estimator)
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-12)
    shift = (out - adv)[mask == 1]
    assert abs(shift.sum()) < 1e-12  # centred on the batch: zero-sum over the model tokens
    assert metrics["transform/all_groups/kl_shaping/mean"] == pytest.approx(float(np.mean(out[mask == 1])))


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_kl_shaping_on_a_batch_split_over_processes_is_the_whole_batchs(estimator):
    """Each share gets sum_over_processes (here: its own [KL sum, token count] plus the other share's); the shaped rows are
    those of the whole batch at once, and a share with no model token still takes part."""
    rng = np.random.default_rng(11)
    adv = rng.normal(size=(5, 6))
    mask = (rng.random((5, 6)) < 0.6).astype(float)
    mask[4] = 0  # a row without model tokens: its share has none
    logp, ref = -rng.random((5, 6)) * 2, -rng.random((5, 6)) * 2
    whole = plain_kl_shaping(adv.tolist(), mask.tolist(), logp.tolist(), ref.tolist(), 0.3, estimator)
    shares = [slice(0, 2), slice(2, 4), slice(4, 5)]
    sent = []

    def share_sums(part):  # what each process sends: its KL sum and token count, computed plainly
        pairs = zip(logp[part].ravel().tolist(), ref[part].ravel().tolist(), mask[part].ravel().tolist(), strict=True)
        kl = [((lp - r) if estimator == "k1" else (math.exp(r - lp) - (r - lp) - 1), m) for lp, r, m in pairs]
        return np.array([sum(k for k, m in kl if m), sum(m for _, m in kl)])

    for part in shares:
        others = sum((share_sums(p) for p in shares if p != part), np.zeros(2))

        def summed(values, others=others):
            sent.append(values.copy())
            return values + others

        out, _ = apply_transforms(
            adv[part],
            [("kl_shaping", {"coef": 0.3, "estimator": estimator})],
            token_level=True,
            mask=mask[part],
            logprobs=logp[part],
            ref_logprobs=ref[part],
            sum_over_processes=summed,
        )
        np.testing.assert_allclose(out, np.array(whole)[part], rtol=0, atol=1e-12)
    assert len(sent) == len(shares) and sent[-1].tolist() == [0.0, 0.0]


def test_entries_in_every_form_apply_in_order_and_repeats_get_their_own_metrics():
    out, metrics = apply_transforms(np.array(VALUES), [("clip", {"max": 2.0}), {"name": "scale", "negative": 0.5}, ("clip", {"min": -1.0})])
    assert out.tolist() == plain_clip(plain_scale(plain_clip(VALUES, None, 2.0), 1.0, 0.5), -1.0, None)
    assert {"transform/all_groups/clip/mean", "transform/all_groups/scale/mean", "transform/all_groups/clip#2/mean"} <= set(metrics)


def _unchecked(name):
    """``name`` selected without the config-time trial call (as a plugin's transform that passes it would be)."""
    from rllm_plugins.transforms import SelectedTransform, get_transform

    return (SelectedTransform(get_transform(name), {}, name),)


def grpo(rewards):
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    return [(r - mean) / (std + 1e-6) for r in rewards]


def groups_of(*reward_lists, role="solver"):
    return [
        TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1, 2]), Step(response_ids=[3])], reward=r) for r in rewards], group_id=f"q{k}:{role}")
        for k, rewards in enumerate(reward_lists)
    ]


def test_the_collector_transforms_each_roles_advantages_and_logs_them():
    groups = groups_of([1.0, 0.0, 0.0, 1.0, 1.0], [0.0, 1.0])
    config = AlgorithmConfig(estimator="grpo", advantage_transforms=[("clip", {"min": -0.5, "max": 0.5}), ("scale", {"positive": 2.0})])
    metrics = collect_reward_and_advantage_from_trajectory_groups(groups, config)
    for group, rewards in zip(groups, [[1.0, 0.0, 0.0, 1.0, 1.0], [0.0, 1.0]], strict=True):
        expected = plain_scale(plain_clip(grpo(rewards), -0.5, 0.5), 2.0, 1.0)
        for traj, want in zip(group.trajectories, expected, strict=True):
            assert [s.advantage for s in traj.steps] == pytest.approx([want, want], abs=1e-12)
    used = [s.advantage for g in groups for t in g.trajectories for s in t.steps[:1]]
    assert metrics["advantage/solver/max"] == pytest.approx(max(used)) and metrics["transform/solver/scale/max"] == pytest.approx(max(used))
    before = plain_clip([a for rewards in ([1.0, 0.0, 0.0, 1.0, 1.0], [0.0, 1.0]) for a in grpo(rewards)], -0.5, 0.5)
    assert metrics["transform/solver/clip/max"] == pytest.approx(max(before))


def test_a_registered_transform_gets_the_context_it_names_and_cannot_change_its_input():
    seen = {}

    @register_advantage_transform("test_rank_in_group")
    def rank_in_group(advantages, *, offsets, rewards, lengths, bonus: float = 0.0):
        seen.update(offsets=offsets.tolist(), rewards=rewards.tolist(), lengths=lengths.tolist())
        return advantages + bonus * lengths

    @register_advantage_transform("test_in_place")
    def in_place(advantages):
        advantages *= 2
        return advantages

    try:
        groups = groups_of([1.0, 0.0, 0.0], [2.0, 5.0])
        config = AlgorithmConfig(estimator="reinforce", advantage_transforms=[("test_rank_in_group", {"bonus": 0.25})])
        collect_reward_and_advantage_from_trajectory_groups(groups, config)
        assert seen == {"offsets": [0, 3, 5], "rewards": [1.0, 0.0, 0.0, 2.0, 5.0], "lengths": [3.0] * 5}
        assert [t.steps[0].advantage for g in groups for t in g.trajectories] == [1.75, 0.75, 0.75, 2.75, 5.75]
        with pytest.raises(
            ValueError, match=r"\[0\]: advantage transform 'test_in_place' \(user code \(.*\)\) fails on a small input .*: output array is read-only"
        ):
            AlgorithmConfig(estimator="reinforce", advantage_transforms=["test_in_place"])
        with pytest.raises(ValueError, match=r"advantage transform 'test_in_place' \(user code \(.*\)\) for role 'all_groups': output array is read-only"):
            apply_transforms(np.array([1.0, 2.0]), _unchecked("test_in_place"))
    finally:
        unregister_advantage_transform("test_rank_in_group")
        unregister_advantage_transform("test_in_place")


def test_step_level_estimators_are_transformed_per_step_with_the_turn_index():
    seen = {}

    @register_advantage_transform("test_turns")
    def turns(advantages, *, turn_index, traj_offsets):
        seen.update(turn_index=turn_index.tolist(), traj_offsets=traj_offsets.tolist())
        return advantages

    try:
        groups = [
            TrajectoryGroup(
                [
                    Trajectory(steps=[Step(reward=1.0), Step(reward=0.0), Step(reward=1.0)], reward=1.0),
                    Trajectory(steps=[Step(reward=0.0)], reward=0.0),
                ],
                group_id="q:agent",
            )
        ]
        config = AlgorithmConfig(estimator="step_reinforce", advantage_transforms=["test_turns", ("clip", {"max": 0.1})])
        metrics = collect_reward_and_advantage_from_trajectory_groups(groups, config)
        assert seen == {"turn_index": [0, 1, 2, 0], "traj_offsets": [0, 3, 4]}
        plain = AlgorithmConfig(estimator="step_reinforce")
        reference = [
            TrajectoryGroup([Trajectory(steps=[Step(reward=s.reward) for s in t.steps], reward=t.reward) for t in g.trajectories], group_id=g.group_id)
            for g in groups
        ]
        collect_reward_and_advantage_from_trajectory_groups(reference, plain)
        want = plain_clip([s.advantage for t in reference[0].trajectories for s in t.steps], None, 0.1)
        assert [s.advantage for t in groups[0].trajectories for s in t.steps] == pytest.approx(want)
        assert metrics["transform/agent/clip/max"] == pytest.approx(max(want))
    finally:
        unregister_advantage_transform("test_turns")


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (["clp"], "AlgorithmConfig.advantage_transforms[0]: Unknown advantage transform 'clp'. Did you mean 'clip'?"),
        (
            [("clip", {"maximum": 1.0})],
            "AlgorithmConfig.advantage_transforms[0]: advantage transform 'clip' (rllm-plugins (built-in)) has no option(s) ['maximum']; its options: min, max",
        ),
        ([{"max": 1.0}], "AlgorithmConfig.advantage_transforms[0]: a mapping entry needs a 'name' key"),
        (
            ["scale", ("clip", {"min": 2.0, "max": 1.0})],
            "AlgorithmConfig.advantage_transforms[1]: advantage transform 'clip' (rllm-plugins (built-in))"
            " fails on a small input with the options {'min': 2.0, 'max': 1.0}: clip: option 'min' (2.0) is greater than 'max' (1.0)",
        ),
        ([("scale", {"negative": -1.0})], "scale: option 'negative' must be a finite number >= 0, got -1.0"),
        (
            "clip",
            "AlgorithmConfig.advantage_transforms[0]: advantage transform 'clip' (rllm-plugins (built-in))"
            " fails on a small input with the options {}: clip: set 'min', 'max' or both",
        ),
        ({"name": "clip"}, "AlgorithmConfig.advantage_transforms must be a list of transforms"),
    ],
)
def test_bad_entries_are_refused_when_the_config_is_built(entries, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        AlgorithmConfig(advantage_transforms=entries)


def test_a_token_level_transform_is_refused_where_advantages_are_per_trajectory():
    config = AlgorithmConfig(advantage_transforms=["kl_shaping"])
    with pytest.raises(ValueError, match=r"advantage transform 'kl_shaping' .* works on per-token advantages \(B, T\)"):
        collect_reward_and_advantage_from_trajectory_groups(groups_of([1.0, 0.0]), config)


def test_a_transform_returning_a_wrong_shape_or_nan_is_named():
    @register_advantage_transform("test_shorter")
    def shorter(advantages):
        return advantages[:-1]

    @register_advantage_transform("test_nan")
    def nan(advantages):
        return advantages * np.nan

    try:
        with pytest.raises(ValueError, match=r"'test_shorter' .* returned shape \(1,\) for advantages of shape \(2,\)"):
            apply_transforms(np.array([1.0, 2.0]), ["test_shorter"])
        with pytest.raises(ValueError, match=r"'test_nan' .* returned nan at position \[0\]; advantages must be finite"):
            apply_transforms(np.array([1.0, 2.0]), ["test_nan"])
    finally:
        unregister_advantage_transform("test_shorter")
        unregister_advantage_transform("test_nan")


@pytest.mark.parametrize(
    ("name", "options"), [("clip", {"min": -1.0, "max": 1.0}), ("scale", {"positive": 0.5, "negative": 2.0}), ("kl_shaping", {"coef": 0.1}), ("codapo", {})]
)
def test_the_built_ins_pass_their_contract(name, options):
    report = check_transform(name, options)
    assert report.ok, str(report)


def test_the_contract_catches_a_transform_that_writes_into_its_input_and_one_that_is_not_elementwise():
    @register_advantage_transform("test_mutates", elementwise=True)
    def mutates(advantages):
        advantages += 1.0
        return advantages

    @register_advantage_transform("test_not_elementwise", elementwise=True)
    def centred(advantages):
        return advantages - advantages.mean()

    try:
        verdicts = {rule: ok for rule, ok, _ in check_transform("test_mutates").results}
        assert {rule for rule, ok in verdicts.items() if not ok} == {"no mutation"} and "elementwise (per token = per sequence)" in verdicts
        verdicts = {rule: ok for rule, ok, _ in check_transform("test_not_elementwise").results}
        assert verdicts["elementwise (per token = per sequence)"] is False
    finally:
        unregister_advantage_transform("test_mutates")
        unregister_advantage_transform("test_not_elementwise")


def plain_codapo(advantages_by_group, rewards_by_group, mean_logprobs_by_group, offset, correct=1.0):
    """CoDaPO's CoDaWeighting (verl #7497): v = exp(mean of the responses' mean log-probs) * 4 a (1 - a), a the share correct."""
    out = []
    for advantages, rewards, means in zip(advantages_by_group, rewards_by_group, mean_logprobs_by_group, strict=True):
        a = sum(abs(r - correct) <= 1e-6 for r in rewards) / len(rewards)
        v = math.exp(sum(means) / len(means)) * 4 * a * (1 - a)
        out.append([x * (v + offset) for x in advantages])
    return out


def test_codapo_reweights_each_question_by_its_codavalue_from_the_steps_log_probs():
    rewards = [[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0], [0.0, 1.0, 0.5]]
    logprobs = [[[-0.2, -0.4], [-1.0, -0.5]], [[-0.1, -0.3], [-0.2, -0.2]], [[-2.0, -1.0], [-0.5, -0.5]]]  # two tokens per step, two steps
    groups = [
        TrajectoryGroup(
            [Trajectory(steps=[Step(response_ids=[1, 2], logprobs=lp) for lp in logprobs[(g + t) % 3]], reward=r) for t, r in enumerate(rs)],
            group_id=f"q{g}",
        )
        for g, rs in enumerate(rewards)
    ]
    config = AlgorithmConfig(estimator="grpo", advantage_transforms=[{"name": "codapo", "weight_offset": 0.2}])
    collect_reward_and_advantage_from_trajectory_groups(groups, config)
    means = [[sum(sum(lp) for lp in logprobs[(g + t) % 3]) / 4 for t in range(len(rs))] for g, rs in enumerate(rewards)]
    expected = plain_codapo([grpo(rs) for rs in rewards], rewards, means, 0.2)
    for group, want in zip(groups, expected, strict=True):
        assert [t.steps[0].advantage for t in group.trajectories] == pytest.approx(want, abs=1e-12)


def test_codapo_without_log_probs_in_the_steps_says_what_is_missing():
    config = AlgorithmConfig(estimator="grpo", advantage_transforms=["codapo"])
    with pytest.raises(ValueError, match=r"advantage transform 'codapo' .* needs \['mean_logprobs'\], which this path does not provide"):
        collect_reward_and_advantage_from_trajectory_groups(groups_of([1.0, 0.0]), config)


def test_the_collectors_turn_metrics_are_those_of_the_transformed_advantages():
    """As TRL's: the transforms run inside the estimator's run, so every advantage metric of a step-level role is of their output."""
    rewards = ([1.0, 0.0], [0.0, 0.0], [2.0, 1.0])
    groups = [TrajectoryGroup([Trajectory(steps=[Step(prompt_ids=[1], response_ids=[2], reward=r) for r in rs], reward=0.0) for rs in rewards], group_id="t0")]
    config = AlgorithmConfig(estimator="step_reinforce", advantage_transforms=[("clip", {"max": 0.3})])
    metrics = collect_reward_and_advantage_from_trajectory_groups(groups, config)
    by_turn = [[t.steps[k].advantage for t in groups[0].trajectories] for k in range(2)]
    assert max(max(turn) for turn in by_turn) == 0.3, "the clip changed something"
    for k, turn in enumerate(by_turn):
        assert metrics[f"turn/all_groups/{k}/advantage_mean"] == pytest.approx(sum(turn) / len(turn))


def test_kl_shaping_refuses_a_sum_over_processes_that_is_not_two_finite_sums():
    mask, logp, ref = np.ones((1, 2)), np.full((1, 2), -1.0), np.full((1, 2), -1.2)
    for bad in (lambda v: v[:1], lambda v: v * np.nan):
        with pytest.raises(ValueError, match=r"kl_shaping: sum_over_processes returned .* for \[KL sum, token count\]; expected two finite sums"):
            apply_transforms(np.zeros((1, 2)), ["kl_shaping"], token_level=True, mask=mask, logprobs=logp, ref_logprobs=ref, sum_over_processes=bad)


def test_a_run_refuses_a_per_unit_context_of_the_wrong_length():
    from rllm_plugins.transforms import resolve_transforms
    from rllm_plugins.transforms.stage import Transforms

    transforms = Transforms(resolve_transforms([("clip", {"max": 1.0})], "here"), "here", context={"lengths": np.ones(3)})
    with pytest.raises(ValueError, match=r"here: the context 'lengths' has shape \(3,\) for 4 units \(one value per unit\)"):
        transforms.apply(np.zeros(4), np.array([2, 2]), np.ones(4, dtype=np.int64), {}, "solver")


def test_a_transform_reading_scores_gets_the_collectors_rewards_at_both_levels():
    """The collector shapes no reward: a unit's task score is its reward (the trajectory's; a step's own)."""
    seen = []

    @register_advantage_transform("test_scores_seen", requires=("scores",))
    def scores_seen(advantages, *, scores, rewards):
        seen.append((scores.tolist(), rewards.tolist()))
        return advantages.copy()

    try:
        groups = [TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1], reward=s) for s in (0.5, 0.25)], reward=r) for r in (1.0, 0.0)], group_id="q")]
        collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="grpo", advantage_transforms=["test_scores_seen"]))
        assert seen[-1] == ([1.0, 0.0], [1.0, 0.0])
        collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="step_reinforce", advantage_transforms=["test_scores_seen"]))
        assert seen[-1] == ([0.5, 0.25, 0.5, 0.25], [0.5, 0.25, 0.5, 0.25])
    finally:
        unregister_advantage_transform("test_scores_seen")
