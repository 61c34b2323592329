"""step_reinforce's ``norm_mean_type`` / ``norm_std_type`` reproduce ROLL HEAD's ``agentic_reward_norm`` for all nine pairs.

ROLL HEAD (alibaba/ROLL 8eb27cc, ``roll/pipeline/agentic/utils.py``), re-stated with ``statistics`` and loops: the batch
statistics are over every step of the batch; per population (the task group, or the whole batch), mean = the
population's, the batch's, or 0; std = the population's unbiased std, the batch's, or none; with a std, a population of
one or a std <= 1e-6 gives 0, else ``(x - mean) / (std + 1e-6)``; without a std, ``x - mean``.
"""

from __future__ import annotations

import itertools
import statistics

import numpy as np
import pytest

from rllm_plugins.estimators import calculate_step_reinforce_advantages
from rllm_plugins.estimators.step_reinforce import check_step_reinforce_options

TYPES = ("group", "batch", None)


def plain_returns(rewards, gamma):
    out, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def roll_head(step_rewards, gamma, grouping, mean_type, std_type):
    """``step_rewards[g][i][t]`` -> advantages, as ROLL HEAD normalises the discounted returns."""
    returns = [[plain_returns(r, gamma) for r in group] for group in step_rewards]
    everything = [x for group in returns for traj in group for x in traj]
    batch_mean = statistics.fmean(everything)
    batch_std = statistics.stdev(everything) if len(everything) > 1 else float("nan")
    keys = [[(g, i, t) for i, traj in enumerate(group) for t in range(len(traj))] for g, group in enumerate(returns)]
    populations = [[k for group in keys for k in group]] if grouping == "batch" else keys
    out = {}
    for population in populations:
        xs = [returns[g][i][t] for g, i, t in population]
        mean = {"group": statistics.fmean(xs), "batch": batch_mean, None: 0.0}[mean_type]
        if std_type is None:
            values = [x - mean for x in xs]
        else:
            std = statistics.stdev(xs) if std_type == "group" and len(xs) > 1 else (batch_std if std_type == "batch" else float("nan"))
            ok = len(xs) > 1 and abs(std) > 1e-6  # NaN compares False
            values = [(x - mean) / (std + 1e-6) if ok else 0.0 for x in xs]
        out.update(zip(population, values, strict=True))
    return [[[out[g, i, t] for t in range(len(traj))] for i, traj in enumerate(group)] for g, group in enumerate(returns)]


def random_step_rewards(seed):
    rng = np.random.default_rng(seed)
    groups = []
    for _ in range(int(rng.integers(1, 4))):
        groups.append([rng.choice([0.0, 0.5, 1.0, -1.0], size=int(rng.integers(1, 4))).tolist() for _ in range(int(rng.integers(1, 4)))])
    return groups


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("grouping", ["task_group", "batch"])
@pytest.mark.parametrize(("mean_type", "std_type"), list(itertools.product(TYPES, TYPES)))
def test_every_roll_head_pair_is_reproduced_with_ddof_1_and_min_std(seed, grouping, mean_type, std_type):
    step_rewards = random_step_rewards(seed)
    outcomes = [np.array([sum(r) for r in group]) for group in step_rewards]
    options = {"grouping": grouping, "norm_mean_type": mean_type, "norm_std_type": std_type, "std_ddof": 1, "min_std": 1e-6, "gamma": 0.9}
    got, _ = calculate_step_reinforce_advantages(outcomes, [[np.array(r) for r in g] for g in step_rewards], **options)
    want = roll_head(step_rewards, 0.9, "batch" if grouping == "batch" else "group", mean_type, std_type)
    for got_group, want_group in zip(got, want, strict=True):
        for a, b in zip(got_group, want_group, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_the_sokoban_setting_group_mean_with_batch_std_differs_from_mean_std():
    step_rewards = [[np.array([1.0, 0.0]), np.array([0.0])], [np.array([5.0]), np.array([0.0, 0.0, 1.0])]]
    outcomes = [np.array([1.0, 0.0]), np.array([5.0, 1.0])]
    sokoban, _ = calculate_step_reinforce_advantages(outcomes, step_rewards, norm_std_type="batch", std_ddof=1, min_std=1e-6)
    per_group, _ = calculate_step_reinforce_advantages(outcomes, step_rewards, std_ddof=1, min_std=1e-6)
    want = roll_head([[[1.0, 0.0], [0.0]], [[5.0], [0.0, 0.0, 1.0]]], 1.0, "group", "group", "batch")
    np.testing.assert_allclose(sokoban[1][0], want[1][0])
    assert not np.allclose(sokoban[1][0], per_group[1][0])


@pytest.mark.parametrize(
    ("method", "pair"), [("mean_std", ("group", "group")), ("mean", ("group", None)), ("identity", (None, None)), ("asym_clip", ("group", "group"))]
)
def test_method_is_a_shorthand_for_its_pair(method, pair):
    step_rewards = [[np.array([1.0, 0.0]), np.array([0.0]), np.array([0.2, 0.3])]]
    outcomes = [np.array([1.0, 0.0, 0.5])]
    by_method, _ = calculate_step_reinforce_advantages(outcomes, step_rewards, method=method)
    by_types, _ = calculate_step_reinforce_advantages(outcomes, step_rewards, norm_mean_type=pair[0], norm_std_type=pair[1])
    both, _ = calculate_step_reinforce_advantages(outcomes, step_rewards, method=method, norm_mean_type=pair[0], norm_std_type=pair[1])
    for a, b, c in zip(by_method[0], by_types[0], both[0], strict=True):
        np.testing.assert_allclose(c, a)
        if method != "asym_clip":  # its clamp (ROLL 6f5b8f7) is not a normalisation pair
            np.testing.assert_allclose(a, b)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"method": "mean", "norm_std_type": "group"}, r"method='mean' means norm_std_type=None, but norm_std_type='group' is given; set either"),
        ({"method": "identity", "norm_mean_type": "batch"}, r"method='identity' means norm_mean_type=None, but norm_mean_type='batch'"),
        ({"norm_mean_type": "running"}, r"norm_mean_type must be one of \['group', 'batch', None\] \(ROLL's choices\), got 'running'"),
        ({"norm_std_type": "Group"}, r"norm_std_type must be one of"),
    ],
)
def test_contradictions_and_unknown_types_are_refused_naming_the_options(options, message):
    with pytest.raises(ValueError, match=message):
        check_step_reinforce_options(options)
    with pytest.raises(ValueError, match=message):
        calculate_step_reinforce_advantages([np.array([1.0, 0.0])], [[np.array([1.0]), np.array([0.0])]], **options)


def test_the_docs_head_rows_name_options_that_give_roll_heads_pair():
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "turn_level.md").read_text()
    rows = re.findall(r"^\| HEAD `norm_mean_type: (\w+), norm_std_type: (\w+)`[^|]* \| `([^|]*)` \|", doc, re.M)
    assert len(rows) == 4
    step_rewards = random_step_rewards(5)
    outcomes = [np.array([sum(r) for r in group]) for group in step_rewards]
    for mean_type, std_type, cell in rows:
        kwargs = eval(f"dict({cell})")  # the cell is the options as Python keywords
        got, _ = calculate_step_reinforce_advantages(outcomes, [[np.array(r) for r in g] for g in step_rewards], **kwargs)
        want = roll_head(step_rewards, 1.0, "group", *(None if t == "null" else t for t in (mean_type, std_type)))
        np.testing.assert_allclose(np.concatenate([a for g in got for a in g]), [x for g in want for t in g for x in t], rtol=1e-9, atol=1e-12)
