"""The bias measurement of docs/turn_level.md: which rows are biased, the exact gradient, and the page's tables are the program's."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks.turn_baseline_bias import BEGIN, CS, END, GROUP, GROUPS, HORIZON, ROWS, SEED, SETTINGS, markdown, sample, table, true_gradient

DOC = Path(__file__).resolve().parents[2] / "docs" / "turn_level.md"

RFC = "RFC's construction (per-turn-index sum)"
MT_GRPO = 'turn_grpo value="reward" ended="present" (MT-GRPO)'
REWARD_ABSORBING = 'turn_grpo value="reward" ended="absorbing"'
DEFAULT = 'turn_grpo value="return" ended="absorbing" (default)'
RETURN_PRESENT = 'turn_grpo value="return" ended="present"'
TO_GO = 'turn_grpo value="reward_to_go"'
FIX = 'turn_grpo value="reward_to_go" baseline="leave_one_out" (RFC\'s criterion)'
GIGPO_RETURN = "gigpo, anchor = turn index = state (gamma=1)"
GIGPO_REWARD = "gigpo, anchor = turn index (gamma=0)"
GIGPO_ONE = "gigpo, one anchor state for every turn"
STEP_REINFORCE = 'step_reinforce method="mean"'
CREDIT = "turn_credit (score: intermediate reward so far)"
COMPOSITE = "composite 0.5 grpo + 0.5 turn_grpo"

UNBIASED = ("rloo (return)", FIX, "turn_gae, no critic (V=0, lam=1, whiten=False)")
SHRUNK_BY_1_OVER_N = (DEFAULT, TO_GO, COMPOSITE)  # a mean over the whole task group that includes the trajectory: (n - 1)/n of the target
SHRUNK = (RETURN_PRESENT, GIGPO_RETURN)  # the population of turn t includes the trajectory: shrunk, by more than 1/n
BIASED = (RFC, MT_GRPO, REWARD_ABSORBING, GIGPO_REWARD, GIGPO_ONE, STEP_REINFORCE, CREDIT)


@pytest.fixture(scope="module")
def results():
    return table()


def cells(results, setting, name):
    return zip(CS, results[setting][name], strict=True)


def test_every_row_is_classified():
    assert sorted(UNBIASED + SHRUNK_BY_1_OVER_N + SHRUNK + BIASED) == sorted(row.name for row in ROWS)


def test_the_exact_gradient_is_the_closed_form():
    """d/dtheta E[(1 - payback) c (K - 1)] with E[K - 1] = sum_{k=1}^{H-1} p^k and dp/dtheta = p (1 - p)."""
    for theta, c, payback in itertools.product((0.0, 0.7, -1.3), (0.0, 0.5, 2.0), (1.0, 0.5, 0.0)):
        p = 1.0 / (1.0 + math.exp(-theta))
        want = (1.0 - payback) * c * sum(k * p ** (k - 1) for k in range(1, HORIZON)) * p * (1.0 - p)
        assert true_gradient(c, payback, theta) == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert true_gradient(1.0, 1.0) == 0.0


def test_the_sample_is_the_environment():
    """Continued turns earn c; the last pays back a fraction and adds the noise, which is the whole return when c = 0 (same draws)."""
    noise = sample(0.0, 50).batch.outcomes
    e = sample(2.0, 50, payback=0.5)
    assert e.batch.outcomes.size == GROUP * 50 and (sample(2.0, 50).turns == e.turns).all()
    for i in range(e.turns.size):
        rewards = e.batch.step_rewards[e.batch.step_offsets[i] : e.batch.step_offsets[i + 1]]
        assert rewards.size == e.turns[i] and rewards[:-1].tolist() == [2.0] * (e.turns[i] - 1)
        assert rewards[-1] == pytest.approx(-0.5 * 2.0 * (e.turns[i] - 1) + noise[i])
        assert e.batch.outcomes[i] == pytest.approx(0.5 * 2.0 * (e.turns[i] - 1) + noise[i])


def test_nothing_is_biased_without_intermediate_rewards(results):
    for setting in SETTINGS:
        for row in ROWS:
            bias, se = results[setting][row.name][0]
            assert abs(bias) < 3 * se, (setting, row.name, bias, se)


def test_the_unbiased_rows_stay_within_three_standard_errors_in_both_settings(results):
    for setting, name in itertools.product(SETTINGS, UNBIASED):
        for c, (bias, se) in cells(results, setting, name):
            assert abs(bias) < 3 * se, (setting, name, c, bias, se)


def test_a_mean_that_includes_the_trajectory_shrinks_the_gradient_by_1_over_n(results):
    for name in SHRUNK_BY_1_OVER_N + SHRUNK:
        for c, (bias, se) in cells(results, "full", name):
            assert abs(bias) < 3 * se, (name, c, bias, se)
        for c, (bias, se) in cells(results, "half", name):
            if c > 0:
                assert bias < -4 * se, (name, c, bias, se)
    k = {row.name: row.k for row in ROWS}
    for name in SHRUNK_BY_1_OVER_N:
        for c, (bias, se) in cells(results, "half", name):
            exact = -k[name] * true_gradient(c, SETTINGS["half"]) / GROUP  # (n - 1)/n of k times the gradient
            assert abs(bias - exact) < 3 * se, (name, c, bias, exact, se)
    for c, (present, _), (absorbing, _) in zip(CS, results["half"][RETURN_PRESENT], results["half"][DEFAULT], strict=True):
        assert present <= absorbing, c  # the population of a later turn is smaller: a larger shrink


def test_the_biased_rows_are_biased_beyond_four_standard_errors_growing_with_c(results):
    for name in BIASED:
        points = results["full"][name]
        for c, (bias, se) in zip(CS, points, strict=True):
            if c > 0:
                assert bias > 4 * se, (name, c, bias, se)  # towards more turns
        assert [b for b, _ in points] == sorted(b for b, _ in points)
    for name in BIASED:
        for c, (bias, se) in cells(results, "half", name):
            if c > 0 and name != STEP_REINFORCE:
                assert abs(bias) > 4 * se, (name, c, bias, se)
            if name == STEP_REINFORCE:
                assert abs(bias) < 3 * se, (c, bias, se)  # the page: at payback 0.5 its bias vanishes here


def test_rows_that_are_one_estimator_give_the_same_numbers(results):
    for setting in SETTINGS:
        for a, b in ((RETURN_PRESENT, GIGPO_RETURN), (MT_GRPO, GIGPO_REWARD), (TO_GO, DEFAULT)):
            np.testing.assert_allclose(results[setting][a], results[setting][b], rtol=1e-9, atol=1e-12)


def test_the_pages_tables_are_the_programs(results):
    page = DOC.read_text()
    assert page.count(BEGIN) == 1 and page.count(END) == 1
    written = page.split(BEGIN, 1)[1].split(END, 1)[0]
    assert written == "\n" + markdown(results)


def test_the_pages_prose_names_the_programs_settings():
    """The setting the page describes: its turns, group size, task groups, seed, the half payback's gradient and each k."""
    text = DOC.read_text().split("## Learned stopping: which per-turn baselines are biased", 1)[1].split(BEGIN, 1)[0]
    prose = " ".join(text.split())
    for claim in (
        f"up to {HORIZON} turns",
        f"per task group of {GROUP}",
        f"over {GROUPS:,} task groups",
        f"seed {SEED}",
        f"the 2{'⁰¹²³⁴⁵⁶⁷⁸⁹'[HORIZON - 1]} continue/stop",
    ):
        assert claim in prose, claim
    assert SETTINGS == {"full": 1.0, "half": 0.5} and "with half paid back" in prose
    for c in (0.5, 1.0, 2.0):
        assert true_gradient(c, 0.5) == pytest.approx(0.6875 * c / 2, rel=1e-12)  # the page: `0.6875 c / 2`
    k = {row.name: row.k for row in ROWS}
    assert {name for name, weight in k.items() if weight == 2.0} == {row.name for row in ROWS if row.name.startswith(("turn_grpo", "gigpo"))}
    assert k[COMPOSITE] == 1.5 and all(weight == 1.0 for name, weight in k.items() if not name.startswith(("turn_grpo", "gigpo", "composite")))
