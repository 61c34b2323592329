"""The bias measurement of docs/turn_level.md: which rows are biased, the exact gradient, and the page's tables are the program's."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks.turn_baseline_bias import (
    BEGIN,
    CS,
    END,
    GROUP,
    GROUPS,
    HORIZON,
    NO_STD,
    ROWS,
    SEED,
    SETTINGS,
    SHAPED,
    TOKENS,
    markdown,
    sample,
    shaped,
    table,
    true_gradient,
    turn_terms,
)
from rllm_plugins.registry import get_estimator
from rllm_plugins.run import Call, Wording, run_steps
from rllm_plugins.shaping import resolve_shapers
from rllm_plugins.shaping.stage import Shapers

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


# --- under a length penalty: shapers whose term depends on the number of turns -----------------------------------

TURN_PENALTY = (("turn_penalty", {"coef": 0.25, "free_turns": 1}),)
PER_TURN_REWARD = (RFC, MT_GRPO, REWARD_ABSORBING, GIGPO_REWARD)  # a decision credited with its own turn's reward against its turn's mean


def test_the_shaped_exact_gradient_by_hand_at_two_turns():
    """H = 2: K = 2 with p (continue), 1 with 1 - p, so d/dtheta E[R] = p (1 - p) ((1 - payback) c + f(2) - f(1)), f the term written out."""
    for theta, c, payback in itertools.product((0.0, 0.7, -1.3), (0.0, 0.5, 2.0), (1.0, 0.5)):
        p = 1.0 / (1.0 + math.exp(-theta))
        for coef, free in ((0.25, 0), (0.25, 1), (0.1, 2)):
            f = {k: -coef * max(0, k - free) for k in (1, 2)}
            want = p * (1.0 - p) * ((1.0 - payback) * c + f[2] - f[1])
            got = true_gradient(c, payback, theta, shapers=(("turn_penalty", {"coef": coef, "free_turns": free}),), horizon=2)
            assert got == pytest.approx(want, rel=1e-12, abs=1e-15), (theta, c, payback, coef, free)
        # dapo_overlong, max_length 2 turns of tokens, buffer 1 turn: 0 at K = 1, -factor at K = 2
        dapo = (("dapo_overlong", {"max_length": 2 * TOKENS, "buffer": TOKENS, "factor": 0.5}),)
        want = p * (1.0 - p) * ((1.0 - payback) * c - 0.5)
        assert true_gradient(c, payback, theta, shapers=dapo, horizon=2) == pytest.approx(want, rel=1e-12, abs=1e-15)


def test_the_shaped_exact_gradient_is_the_closed_form():
    """H = 4, P(K = k) = p^(k-1) (1 - p) below H, p^(H-1) at H: the settings' terms -0.25 (K - 1) and (0, 0, -0.5, -1)."""
    assert turn_terms(SHAPED["turn_penalty"][1]).tolist() == [0.0, -0.25, -0.5, -0.75]
    assert turn_terms(SHAPED["dapo_overlong"][1]).tolist() == [0.0, 0.0, -0.5, -1.0]
    for theta, c in itertools.product((0.0, 0.7, -1.3), (0.0, 2.0)):
        p = 1.0 / (1.0 + math.exp(-theta))
        dk = sum(k * p ** (k - 1) for k in range(1, HORIZON)) * p * (1.0 - p)  # d E[K - 1] / d theta
        assert true_gradient(c, 1.0, theta, shapers=SHAPED["turn_penalty"][1]) == pytest.approx(-0.25 * dk, rel=1e-12, abs=1e-15)
        assert true_gradient(c, 0.5, theta, shapers=TURN_PENALTY) == pytest.approx((c / 2 - 0.25) * dk, rel=1e-12, abs=1e-15)
        # E[f(K)] = -0.5 p^2 (1 - p) - p^3: its derivative in p is -p - 1.5 p^2
        want = (-p - 1.5 * p * p) * p * (1.0 - p)
        assert true_gradient(c, 1.0, theta, shapers=SHAPED["dapo_overlong"][1]) == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert SHAPED["turn_penalty"][0] == SHAPED["dapo_overlong"][0] == 1.0


@pytest.mark.parametrize(
    "entries",
    [
        (("length_penalty", {"output_weight": 0.0, "input_weight": 0.0, "turns_weight": 0.1}),),
        (("turn_penalty", {"coef": 0.25, "only_successful": True}),),
        (("linear_length_penalty", {"max_length": 1024}),),
    ],
)
def test_a_term_that_moves_with_the_group_or_the_reward_has_no_exact_gradient_here(entries):
    with pytest.raises(ValueError, match="not on the turns alone"):
        true_gradient(1.0, 1.0, shapers=entries)


def test_the_shaped_episodes_are_what_run_steps_hands_the_estimator():
    """The package's pipeline, with its Shapers stage, gives the registered rows the advantages they give on the shaped episodes."""
    e = sample(1.0, 40, payback=0.5)
    wording = Wording("steps", lambda values, what: f"{what} not finite")
    for entries in (*(entries for _, entries in SHAPED.values()), SHAPED["turn_penalty"][1] + SHAPED["dapo_overlong"][1]):
        s = shaped(e, entries)
        term = turn_terms(entries)[e.turns - 1]
        np.testing.assert_allclose(s.batch.outcomes, e.batch.outcomes + term, rtol=0, atol=1e-12)
        last = s.batch.step_offsets[1:] - 1
        np.testing.assert_allclose(s.batch.step_rewards[last], e.batch.step_rewards[last] + term, rtol=0, atol=1e-12)
        rest = np.ones(e.batch.num_steps, dtype=bool)
        rest[last] = False
        assert (s.batch.step_rewards[rest] == e.batch.step_rewards[rest]).all()
        for name, options in (("turn_grpo", {"value": "reward_to_go", "baseline": "leave_one_out"}), ("turn_grpo", {}), ("gigpo", {}), ("step_reinforce", {})):
            turns = e.turns.astype(np.float64)
            stage = Shapers(resolve_shapers(list(entries), "reward_shapers"), "reward_shapers", context={"turns": turns, "lengths": TOKENS * turns})
            call = Call(get_estimator(name), {**NO_STD, **options}, name)
            piped, _, _ = run_steps(call, e.batch, wording=wording, role="actor", shapers=stage)
            direct = get_estimator(name).batched_form(s.batch, **NO_STD, **options)
            np.testing.assert_array_equal(piped, direct)


def test_under_a_length_penalty_the_unbiased_rows_stay_unbiased_and_the_mean_rows_shrink_it_by_1_over_n(results):
    k = {row.name: row.k for row in ROWS}
    for setting, (payback, entries) in SHAPED.items():
        assert all(true_gradient(c, payback, shapers=entries) < 0.0 for c in CS)
        for name in UNBIASED:
            for c, (bias, se) in cells(results, setting, name):
                assert abs(bias) < 3 * se, (setting, name, c, bias, se)
        for name in SHRUNK_BY_1_OVER_N:
            for c, (bias, se) in cells(results, setting, name):
                exact = -k[name] * true_gradient(c, payback, shapers=entries) / GROUP
                assert bias > 4 * se and abs(bias - exact) < 3 * se, (setting, name, c, bias, exact, se)


def test_under_a_length_penalty_the_per_turn_reward_rows_are_biased_without_intermediate_rewards(results):
    k = {row.name: row.k for row in ROWS}
    for setting, (payback, entries) in SHAPED.items():
        truth = true_gradient(0.0, payback, shapers=entries)
        for name in PER_TURN_REWARD:
            bias, se = results[setting][name][0]
            assert bias > 4 * se, (setting, name, bias, se)  # towards more turns
        bias, se = results[setting][RFC][0]
        assert bias + k[RFC] * truth > 4 * se, (setting, bias, truth)  # its mean estimate: more turns, against the penalty
        bias, se = results[setting][MT_GRPO][0]
        assert bias + k[MT_GRPO] * truth < -4 * se, (setting, bias, truth)  # the penalty's sign, a fraction of its size


def test_under_a_length_penalty_growing_c_adds_the_full_payback_tables_bias(results):
    """Without the std every row is linear in the rewards and the draws are the same: the shaped cell minus its c = 0 cell is the full-payback one's."""
    for setting, row in itertools.product(SHAPED, ROWS):
        shaped_cells, full = results[setting][row.name], results["full"][row.name]
        for (b, _), (f, _) in zip(shaped_cells, full, strict=True):
            assert b - shaped_cells[0][0] == pytest.approx(f - full[0][0], abs=1e-9), (setting, row.name)


def test_the_pages_length_penalty_prose_quotes_the_programs_cells(results):
    text = DOC.read_text().split("**Under a length penalty.**", 1)[1].split(BEGIN, 1)[0]
    prose = " ".join(text.split())

    def cell(setting, name, c=0):
        bias, se = results[setting][name][c]
        return f"{bias:+.4f} ± {se:.4f}"

    for name in (DEFAULT, RFC, MT_GRPO):
        for setting in SHAPED:
            assert cell(setting, name) in prose, (setting, name)
    for payback, entries in SHAPED.values():
        assert f"{true_gradient(0.0, payback, shapers=entries):+.4f}".replace("-", "\N{MINUS SIGN}") in prose
    for name, options in (entry for _, entries in SHAPED.values() for entry in entries):
        assert f"`{name}({', '.join(f'{key}={value}' for key, value in options.items())})`" in prose
    assert f"{TOKENS} model tokens a turn" in prose
