"""``rllm_plugins.run``: one estimator run on flat groups, the procedure every driver calls.

Pinned here directly: what the estimator reads is asked once per run, only what it reads is handed over (``lengths``
cut to the live rows with the values), each failed check is worded by the driver, and a state is committed only when
the driver calls the commit, never when a check fails. And, read from the source, no driver calls a form itself.
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import numpy as np
import pytest

from rllm_plugins import AdvEstimatorSpec, AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.discovery import manager
from rllm_plugins.needs import Needs
from rllm_plugins.run import Call, Wording, run_outcome, run_steps
from rllm_plugins.spec import Estimator, Provider
from rllm_plugins.state.store import EstimatorState
from rllm_plugins.steps import StepBatch

ROOT = Path(__file__).resolve().parents[2]
USER = Provider("tests.core.test_run", kind="user")
WORDING = Wording(lambda given, expected: f"size {given} for {expected}", lambda values, what: f"{what} {values.tolist()} not finite")


def estimator(spec: AdvEstimatorSpec) -> Estimator:
    return Estimator(spec, USER)


def centred(values, offsets, /, *, norm_adv_by_std_in_grpo=True):
    """Each value minus its group's mean (no lengths parameter: it reads none)."""
    out = np.empty_like(values)
    for a, b in itertools.pairwise(offsets):
        out[a:b] = values[a:b] - values[a:b].mean()
    return out


class Recorder:
    """A stateful batched form that records each call's inputs; its state counts the rows it saw."""

    def __init__(self, output=None):
        self.calls = []
        self.output = output

    def __call__(self, values, offsets, /, *, state, lengths=None, task_ids=None, norm_adv_by_std_in_grpo=True, scale=1.0):
        self.calls.append({"values": values.copy(), "offsets": offsets.copy(), "lengths": lengths, "task_ids": task_ids, "scale": scale})
        out = values - 1.0 if self.output is None else self.output
        return out, {"seen": int(state.get("seen", 0)) + values.size}


def stateful(recorder: Recorder, name: str = "recording") -> Estimator:
    return estimator(AdvEstimatorSpec(name, batched=recorder, stateful=True))


def test_needs_are_asked_once_per_call_of_the_collector_at_the_step_level():
    asked = []

    def needs_for(options):
        asked.append(dict(options))
        return Needs(anchors=True)

    def last_step(batch, /, **_):
        return batch.step_rewards - batch.step_rewards.mean()

    manager.add_user_estimator(estimator(AdvEstimatorSpec("asks_needs", batched=last_step, level="step", needs_for=needs_for)))
    try:
        groups = [
            TrajectoryGroup([Trajectory(steps=[Step(reward=r, observation="s")], reward=r) for r in (0.0, 1.0)], group_id=f"t{i}:{role}")
            for i, role in enumerate(("solver", "judge"))
        ]
        collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="asks_needs"))
    finally:
        manager.remove_user_estimator("asks_needs")
    assert len(asked) == 2  # one per role: one call each, needs asked once per call
    assert [g.trajectories[1].steps[0].advantage for g in groups] == [0.5, 0.5]


def test_a_call_asks_needs_once_and_run_outcome_asks_none_again():
    asked = []

    def needs_for(options):
        asked.append(1)
        return Needs(lengths=True)

    def open_centred(values, offsets, /, **_):
        return centred(values, offsets)

    call = Call(estimator(AdvEstimatorSpec("lengthy", batched=open_centred, needs_for=needs_for)), {}, "lengthy")
    run_outcome(call, np.array([1.0, 3.0]), np.array([0, 2]), wording=WORDING, role="r", lengths=np.array([2.0, 4.0]))
    run_outcome(call, np.array([1.0, 3.0]), np.array([0, 2]), wording=WORDING, role="r", lengths=np.array([2.0, 4.0]))
    assert len(asked) == 1
    assert call.needs == Needs(lengths=True)


def test_lengths_go_only_to_an_estimator_that_reads_them():
    got = []

    def with_lengths(values, offsets, /, *, lengths=None, **_):
        got.append(lengths)
        return values - values.mean()

    lengths = np.array([2.0, 4.0, 6.0])
    reads = Call(estimator(AdvEstimatorSpec("reads", batched=with_lengths)), {}, "reads")
    run_outcome(reads, np.array([1.0, 2.0, 3.0]), np.array([0, 3]), wording=WORDING, role="r", lengths=lengths)
    assert got[0].tolist() == [2.0, 4.0, 6.0]
    ignores = Call(estimator(AdvEstimatorSpec("ignores", batched=centred)), {}, "ignores")  # closed: a lengths keyword would be a TypeError
    advantages, _ = run_outcome(ignores, np.array([1.0, 2.0, 3.0]), np.array([0, 3]), wording=WORDING, role="r", lengths=lengths)
    assert advantages.tolist() == [-1.0, 0.0, 1.0]


def test_live_rows_cut_values_lengths_and_task_ids_and_drop_an_emptied_group():
    recorder = Recorder()
    call = Call(stateful(recorder), {"norm_adv_by_std_in_grpo": True}, "recording")
    values = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    live = np.array([True, False, False, False, True, True])  # group 1 (rows 2, 3) has no live row
    advantages, commit = run_outcome(
        call,
        values,
        np.array([0, 2, 4, 6]),
        wording=WORDING,
        role="r",
        lengths=np.array([10.0, 20.0, 30.0, 40.0, 50.0, 60.0]),
        live=live,
        task_ids=np.array(["a", "b", "c", "d", "e", "f"], dtype=object),
    )
    seen = recorder.calls[0]
    assert seen["values"].tolist() == [1.0, 5.0, 6.0]
    assert seen["offsets"].tolist() == [0, 1, 3]
    assert seen["lengths"].tolist() == [10.0, 50.0, 60.0]
    assert seen["task_ids"].tolist() == ["a", "e", "f"]
    assert advantages.tolist() == [0.0, 0.0, 0.0, 0.0, 4.0, 5.0]  # the estimator's (value - 1) on live rows, 0 elsewhere
    assert commit is not None


@pytest.mark.parametrize(
    ("offsets", "seen_offsets"),
    [([0, 2, 4, 6], [0, 2, 4, 6]), ([0, 2, 2, 6], [0, 2, 6])],  # every row live: an empty group is still dropped, nothing else changes
)
def test_every_row_live_gives_the_estimator_the_rows_as_they_are(offsets, seen_offsets):
    recorder = Recorder()
    call = Call(stateful(recorder), {"norm_adv_by_std_in_grpo": True}, "recording")
    values = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    advantages, _ = run_outcome(
        call, values, np.array(offsets), wording=WORDING, role="r", live=np.ones(6, dtype=bool), task_ids=np.array(list("abcdef"), dtype=object)
    )
    seen = recorder.calls[0]
    assert seen["values"].tolist() == values.tolist() and seen["offsets"].tolist() == seen_offsets
    assert seen["task_ids"].tolist() == list("abcdef")
    assert advantages.tolist() == (values - 1.0).tolist()  # the estimator's (value - 1), every row


def test_a_state_is_read_from_its_owner_and_committed_only_by_the_commit():
    owner = EstimatorState()
    recorder = Recorder()
    call = Call(stateful(recorder), {"norm_adv_by_std_in_grpo": True}, "recording")
    _, commit = run_outcome(call, np.array([1.0, 2.0]), np.array([0, 2]), wording=WORDING, role="r", state=owner)
    assert owner.state_dict()["estimators"] == {}  # not before the driver's own checks passed
    commit()
    assert owner.state_dict()["estimators"] == {"recording": {"r": {"seen": 2}}}
    assert owner.state_dict()["options"] == {"recording": {"scale": 1.0}}  # the options it ran with
    run_outcome(call, np.array([1.0, 2.0, 3.0]), np.array([0, 3]), wording=WORDING, role="r", state=owner)[1]()
    assert owner.state_dict()["estimators"] == {"recording": {"r": {"seen": 5}}}


@pytest.mark.parametrize(
    ("output", "message"),
    [(np.array([0.0]), "size 1 for 2"), (np.array([0.0, np.nan]), "advantage [0.0, nan] not finite")],
)
def test_a_failed_check_raises_the_drivers_words_and_commits_nothing(output, message):
    owner = EstimatorState()
    owner.commit({("recording", "r"): {"seen": 7}})
    call = Call(stateful(Recorder(output)), {}, "recording")
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        run_outcome(call, np.array([1.0, 2.0]), np.array([0, 2]), wording=WORDING, role="r", state=owner)
    assert owner.state_dict()["estimators"] == {"recording": {"r": {"seen": 7}}}


def test_changed_options_are_refused_before_the_call():
    owner = EstimatorState()
    recorder = Recorder()
    run_outcome(Call(stateful(recorder), {"scale": 1.0}, "recording"), np.array([1.0]), np.array([0, 1]), wording=WORDING, role="r", state=owner)[1]()
    with pytest.raises(ValueError, match=re.escape("option 'scale' is 2.0 now, but the state held was made with scale=1.0")):
        run_outcome(Call(stateful(recorder), {"scale": 2.0}, "recording"), np.array([1.0]), np.array([0, 1]), wording=WORDING, role="r", state=owner)
    assert len(recorder.calls) == 1


def test_framework_settings_reach_only_an_estimator_naming_them_and_are_not_recorded():
    owner = EstimatorState()
    recorder = Recorder()
    _, commit = run_outcome(
        Call(stateful(recorder), {}, "recording"), np.array([1.0]), np.array([0, 1]), wording=WORDING, role="r", state=owner, settings={"scale": 3.0}
    )
    commit()
    assert recorder.calls[0]["scale"] == 3.0
    assert owner.state_dict()["options"] == {"recording": {"scale": 1.0}}
    ignores = Call(estimator(AdvEstimatorSpec("ignores", batched=centred)), {}, "ignores")
    assert run_outcome(ignores, np.array([1.0, 3.0]), np.array([0, 2]), wording=WORDING, role="r", settings={"scale": 3.0})[0].tolist() == [-1.0, 1.0]


def test_run_steps_checks_size_and_finiteness_in_the_drivers_words():
    batch = StepBatch(np.array([1.0, 0.0]), np.array([0, 2]), np.array([1.0, 0.0, 0.0]), np.array([0, 2, 3]))

    def gives(output):
        return Call(estimator(AdvEstimatorSpec("steps", batched=lambda b, /, **_: output, level="step")), {}, "steps")

    advantages, returns, commit = run_steps(gives(np.array([1.0, 2.0, 3.0])), batch, wording=WORDING, role="r")
    assert advantages.tolist() == [1.0, 2.0, 3.0] and returns is None
    commit()
    with pytest.raises(ValueError, match=r"^size 2 for 3$"):
        run_steps(gives(np.array([1.0, 2.0])), batch, wording=WORDING, role="r")
    with pytest.raises(ValueError, match=r"^advantage \[1.0, inf, 3.0\] not finite$"):
        run_steps(gives(np.array([1.0, np.inf, 3.0])), batch, wording=WORDING, role="r")


# --- read from the source: run.py is the only driver code that calls an estimator --------------------------------

FORMS = {"list_form", "batched_form"}
# a config-time trial of TRL's settings, not a run: it checks that the estimator accepts them
TRIALS = {"adapters/rllm_trl/config.py": {"_dry_run"}}


def driver_modules() -> list[Path]:
    return [ROOT / "rllm_plugins" / "advantage.py", *sorted((ROOT / "adapters").rglob("*.py"))]


def calls_of_forms(path: Path) -> list[tuple[int, str, str]]:
    """``(line, enclosing function, what)`` of every use of an estimator's form or of ``call_stateful`` in ``path``."""
    found = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            inside = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and function == "" else function
            if isinstance(child, ast.Attribute) and child.attr in FORMS:
                found.append((child.lineno, inside, f".{child.attr}"))
            if isinstance(child, ast.Name) and child.id == "call_stateful":
                found.append((child.lineno, inside, "call_stateful"))
            if isinstance(child, ast.alias) and child.name.rpartition(".")[2] == "call_stateful":
                found.append((getattr(node, "lineno", 0), inside, "import call_stateful"))
            visit(child, inside)

    visit(ast.parse(path.read_text(), filename=str(path)), "")
    return found


def test_the_source_reader_sees_a_form_call_and_call_stateful(tmp_path):
    module = tmp_path / "driver.py"
    module.write_text(
        "from rllm_plugins.state.store import call_stateful\n"
        "def f(estimator, v, o):\n    return estimator.batched_form(v, o)\n"
        "def g(estimator):\n    form = estimator.list_form\n    return call_stateful(form, {}, 'x')\n"
    )
    assert calls_of_forms(module) == [(1, "", "import call_stateful"), (3, "f", ".batched_form"), (5, "g", ".list_form"), (6, "g", "call_stateful")]


def test_no_driver_but_run_calls_an_estimators_form_or_call_stateful():
    modules = driver_modules()
    assert ROOT / "adapters" / "rllm_verl" / "compute" / "outcome.py" in modules and ROOT / "adapters" / "rllm_trl" / "turns.py" in modules
    offending = []
    for path in modules:
        allowed = TRIALS.get(path.relative_to(ROOT).as_posix(), set())
        offending += [f"{path.relative_to(ROOT)}:{line} ({function}): {what}" for line, function, what in calls_of_forms(path) if function not in allowed]
    assert not offending, f"run an estimator through rllm_plugins.run (run_outcome, run_steps), not directly: {offending}"
