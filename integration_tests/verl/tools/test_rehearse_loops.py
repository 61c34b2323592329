"""``verl-rehearse`` runs what verl runs (verl's own loops, sessions, unscored loops, value-based estimators) and names
what a loop returns that verl would not take, with a non-zero exit."""

from __future__ import annotations

import importlib.util
import json
import random
import statistics
from pathlib import Path

import pytest

pytest.importorskip("verl")

from rllm_verl.tools.rehearse import RehearsalError, main, rehearse
from rllm_verl.versions import verl_features

LOOPS = Path(__file__).resolve().parent / "rehearse_loops"
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "verl_agent_loop"
AGENT = "actor_rollout_ref.rollout.agent"
MULTI_TURN = "actor_rollout_ref.rollout.multi_turn"
EPS = 1e-6
WHERE = "agent loop {name!r}, prompt 0, rollout 0"
FEATURES = verl_features()
V1_ONLY = pytest.mark.skipif(not FEATURES.v1_trainer, reason=f"verl {FEATURES.version} has no v1 trainer, the only one that takes sessions")


@pytest.fixture(autouse=True)
def in_the_loops_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(LOOPS)


def loop(name: str, *more: str) -> list[str]:
    return [f"{AGENT}.agent_loop_config_path=loops.yaml", f"{AGENT}.default_agent_loop={name}", *more]


def grpo(rewards: list[float]) -> list[float]:
    """rLLM's GRPO of one group: (r - mean) / (population std + 1e-6)."""
    mean, sd = statistics.fmean(rewards), statistics.pstdev(rewards)
    return [(r - mean) / (sd + EPS) for r in rewards]


def line_of(text: str) -> int:
    """The line of loops.py that holds ``text``."""
    return next(n for n, line in enumerate((LOOPS / "loops.py").read_text().splitlines(), 1) if text in line)


def failure(overrides: list[str], replies: tuple[str, ...] = ("+", "-")) -> RehearsalError:
    with pytest.raises(RehearsalError) as caught:
        rehearse(["algorithm.adv_estimator=rllm_grpo", *overrides], ["walk"], list(replies))
    return caught.value


def test_verls_single_turn_agent_rehearses_on_one_event_loop_with_the_stand_in_reward():
    replies, seed, n = ["yes", "no"], 4, 4
    rehearsal = rehearse(["algorithm.adv_estimator=rllm_grpo", f"actor_rollout_ref.rollout.n={n}"], ["say yes"], replies, seed=seed)
    draws = random.Random(seed)
    rewards = [float(draws.choice(replies) == "yes") for _ in range(n)]  # one model turn per rollout; the ground truth is the first reply
    assert (rehearsal.agent_loop, rehearsal.target) == ("single_turn_agent", "verl.experimental.agent_loop.single_turn_agent_loop.SingleTurnAgentLoop")
    assert rehearsal.reward.startswith("a stand-in (no custom_reward_function configured)")
    assert [row.reward for row in rehearsal.rows] == rewards and len(set(rewards)) == 2
    assert [row.turns for row in rehearsal.rows] == [1] * n
    assert [row.advantages[0] for row in rehearsal.rows] == pytest.approx(grpo(rewards), abs=1e-5)


@pytest.mark.skipif(importlib.util.find_spec("verl.tools.function_tool") is None, reason=f"verl {FEATURES.version} has no function tools (from 0.8 on)")
def test_verls_tool_agent_calls_the_configured_tool_and_the_custom_reward_function_scores_it():
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    overrides = [
        "algorithm.adv_estimator=rllm_grpo",
        "actor_rollout_ref.rollout.n=4",
        f"{AGENT}.default_agent_loop=tool_agent",
        f"{MULTI_TURN}.function_tool_path=tools.py",
        f"{MULTI_TURN}.max_assistant_turns=2",
        "custom_reward_function.path=reward.py",
        "custom_reward_function.name=compute_score",
    ]
    rehearsal = rehearse(overrides, ["add 2 and 3"], [call, "five"], seed=2, ground_truth="five")
    assert rehearsal.reward == "custom_reward_function 'compute_score' of 'reward.py', through verl's reward manager"
    called = [row for row in rehearsal.rows if row.turns == 2]
    assert called, "a rollout must call the tool"
    assert all(row.anchors[1] == repr("<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n") for row in called)  # the tool's result between the two turns
    assert {row.reward for row in rehearsal.rows} <= {0.5, 1.5} and len({row.reward for row in rehearsal.rows}) == 2


@V1_ONLY
def test_a_session_list_gives_one_row_per_output_each_with_its_sessions_score_and_advantage(monkeypatch):
    monkeypatch.chdir(EXAMPLE)
    overrides = ["algorithm.adv_estimator=rllm_grpo", "actor_rollout_ref.rollout.n=4", f"{AGENT}.agent_loop_config_path=agent_loops.yaml"]
    rehearsal = rehearse([*overrides, f"{AGENT}.default_agent_loop=guess_session"], ["guess"], ["cat", "dog", "bird"], seed=1, ground_truth="dog")
    draws, sessions = random.Random(1), []
    for _ in range(4):  # the game: up to two guesses, stop at 'dog'
        guesses = [draws.choice(["cat", "dog", "bird"])]
        if guesses[0] != "dog":
            guesses.append(draws.choice(["cat", "dog", "bird"]))
        sessions.append(guesses)
    scores = [float(guesses[-1] == "dog") for guesses in sessions]
    assert [(row.rollout, row.output) for row in rehearsal.rows] == [(s, i) for s, guesses in enumerate(sessions) for i in range(len(guesses))]
    assert [row.reward for row in rehearsal.rows] == [scores[row.rollout] for row in rehearsal.rows]
    want = grpo(scores)
    assert [row.advantages[0] for row in rehearsal.rows] == pytest.approx([want[row.rollout] for row in rehearsal.rows], abs=1e-5)


def test_a_session_list_is_refused_on_the_legacy_trainer(monkeypatch):
    monkeypatch.chdir(EXAMPLE)
    if FEATURES.v1_trainer:
        trainer = ["trainer.use_v1=false"]
        said = (
            "verl's legacy trainer (trainer.use_v1=false) takes one AgentLoopOutput per rollout and fails on a list: return one output, "
            "or train with trainer.use_v1=true"
        )
    else:  # the legacy trainer is the only one: its config has no trainer.use_v1
        trainer = []
        said = (
            f"verl {FEATURES.version}'s trainer (it has no v1 trainer) takes one AgentLoopOutput per rollout and fails on a list: return one output, "
            "or upgrade to verl>=0.9.1 and train with trainer.use_v1=true"
        )
    error = failure([f"{AGENT}.agent_loop_config_path=agent_loops.yaml", f"{AGENT}.default_agent_loop=guess_session", *trainer], ("cat",))
    assert error.errors == [f"agent loop 'guess_session', prompt 0, rollout 0: run() returned a list of 1 output(s) (a session); {said}"]


@V1_ONLY
def test_an_empty_session_gives_no_row_and_a_warning():
    rehearsal = rehearse(["algorithm.adv_estimator=rllm_grpo", "actor_rollout_ref.rollout.n=3", *loop("empty_every_second")], ["walk"], ["+"])
    assert [row.rollout for row in rehearsal.rows] == [0, 2]
    assert rehearsal.warnings == [
        "agent loop 'empty_every_second', prompt 0, rollout 1: run() returned [] (no output): verl's v1 trainer gives this rollout no row "
        "('Empty output' in its log)"
    ]


@V1_ONLY
def test_only_empty_sessions_fail_naming_why():
    error = failure(loop("empty"))
    assert error.errors == ["no rollout gave an output, so there is no row to compute advantages on"]
    assert error.warnings == [
        "agent loop 'empty', prompt 0, rollout 0: run() returned [] (no output): verl's v1 trainer gives this rollout no row ('Empty output' in its log)"
    ]


def test_an_inverted_mask_is_named_with_each_turn():
    error = failure(loop("inverted"), ("+",))
    where = WHERE.format(name="inverted")
    assert error.errors == [
        f"{where}: response_mask is 0 on all of turn 0's model tokens (response positions 0..0, '+'); the model's tokens must be 1",
        f"{where}: response_mask is 0 on all of turn 1's model tokens (response positions 9..9, '+'); the model's tokens must be 1",
        f"{where}: response_mask is 1 on 16 tokens the model did not write (first at response positions 1..8, after turn 0: ' seen 0.'); "
        "tool and environment tokens must be 0",
    ]


def test_a_mask_over_the_observations_is_named():
    error = failure(loop("all_ones"), ("+",))
    assert error.errors == [
        f"{WHERE.format(name='all_ones')}: response_mask is 1 on 16 tokens the model did not write (first at response positions 1..8, after turn 0: "
        "' seen 0.'); tool and environment tokens must be 0"
    ]


def test_an_inverted_mask_exits_1_also_with_json(capsys):
    argv = ["algorithm.adv_estimator=rllm_grpo", "--agent-loop-config", "loops.yaml", "--name", "inverted", "--prompt", "walk", "--replies", "+"]
    assert main(argv) == 1
    assert "response_mask is 0 on all of turn 0's model tokens" in capsys.readouterr().err
    assert main([*argv, "--json"]) == 1
    printed = json.loads(capsys.readouterr().out)
    assert printed["ok"] is False and len(printed["errors"]) == 3


@pytest.mark.parametrize(
    "name, said",
    [
        ("short_mask", "response_mask has 17 entries but response_ids 18; give one 0/1 per response token"),
        ("no_such_token", "response_ids[17] = 1000000 is no token id of the tokenizer (0..{top}); 1 such"),
    ],
)
def test_lengths_and_ids_are_checked(name, said):
    with pytest.raises(RehearsalError) as caught:
        rehearse(["algorithm.adv_estimator=rllm_grpo", *loop(name)], ["walk"], ["+"])
    from rllm_verl.tools.rehearse import _tokenizer

    top = len(_tokenizer(None, ["walk", "+"])) - 1
    assert caught.value.errors[0] == f"{WHERE.format(name=name)}: {said.format(top=top)}"


def test_a_response_past_response_length_is_named():
    error = failure(loop("two_turns", "actor_rollout_ref.rollout.response_length=10"), ("+",))
    assert error.errors == [
        f"{WHERE.format(name='two_turns')}: response_ids has 18 tokens, more than actor_rollout_ref.rollout.response_length=10; "
        "truncate response_ids and response_mask to it, as verl's own loops do"
    ]


INVALID_LINE = "prompt_ids=[1, 2]"


def test_an_invalid_output_is_one_readable_line():
    error = failure(loop("invalid"))
    assert error.errors == [
        f"{WHERE.format(name='invalid')}: its AgentLoopOutput is invalid: response_mask.0: Input should be a valid integer, unable to parse "
        f"string as an integer, got 'x'; metrics: Field required (at {LOOPS / 'loops.py'}:{line_of(INVALID_LINE)})"
    ]


def test_a_loop_that_returns_no_agent_loop_output_is_named():
    error = failure(loop("returns_dict"))
    assert error.errors == [f"{WHERE.format(name='returns_dict')}: run() returned dict, not an AgentLoopOutput or a list of them"]


def test_a_loop_that_raises_is_named_with_where():
    error = failure(loop("raises"))
    assert error.errors == [
        f"{WHERE.format(name='raises')}: run() raised RuntimeError: the environment is down (at {LOOPS / 'loops.py'}:{line_of('raise RuntimeError')})"
    ]


@pytest.mark.parametrize(
    "reward, scores", [([], {0.0, 1.0}), (["custom_reward_function.path=reward.py", "custom_reward_function.name=compute_score"], {0.5, 1.5})]
)
def test_an_unscored_loop_is_scored_by_the_reward_function_or_the_stand_in(reward, scores):
    rehearsal = rehearse(
        ["algorithm.adv_estimator=rllm_grpo", "actor_rollout_ref.rollout.n=8", *loop("unscored"), *reward], ["walk"], ["+", "-"], ground_truth="+"
    )
    draws = random.Random(0)
    texts = [f"{draws.choice(['+', '-'])} seen 0.{draws.choice(['+', '-'])} seen 1." for _ in range(8)]
    low, high = sorted(scores)
    assert [row.reward for row in rehearsal.rows] == [high if "+" in text else low for text in texts]


def test_a_value_based_estimator_rehearses_with_a_stand_in_critic():
    overrides = ["algorithm.adv_estimator=rllm_turn_gae", "+algorithm.rllm_estimator_kwargs.whiten=false", *loop("two_turns")]
    rehearsal = rehearse(overrides, ["walk"], ["+"], critic_values=[0.25, 0.5])
    assert rehearsal.critic == (
        "a stand-in: rllm_turn_gae reads a critic's values, here 0.25, 0.5 on model turns 0, 1, ... (the last repeated) (--critic-values); "
        "the GPU run needs critic.enable=true"
    )
    # gamma = lam = 1, the reward 1.0 at the end: each turn's advantage is the return minus the turn's value
    assert rehearsal.rows[0].advantages == pytest.approx([1.0 - 0.25, 1.0 - 0.5])
    constant = rehearse(overrides, ["walk"], ["+"])
    assert constant.rows[0].advantages == pytest.approx([1.0, 1.0]) and "here 0.0 on every token" in str(constant.critic)
