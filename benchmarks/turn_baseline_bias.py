"""Bias of per-turn baselines when the policy decides when to stop (verl RFC #7244), measured against the exact gradient.

The environment: up to ``H`` turns; at each turn before the last the policy continues with probability
``p = sigmoid(theta)`` or stops. A turn after which it continues earns the intermediate reward ``c``; the last
turn's reward pays a fraction ``payback`` of them back and adds noise independent of the actions,
``-payback * c * (K - 1) + eps`` (``K`` turns taken, ``eps ~ N(0, 1)``). The return is
``(1 - payback) * c * (K - 1) + eps``: with ``payback=1`` (full) it does not depend on ``theta`` and the true
gradient is exactly 0; with ``payback=0.5`` (half) it is not. :func:`true_gradient` computes it exactly, over the
``2^(H-1)`` continue/stop sequences.

With a length penalty (:data:`SHAPED`): a reward shaper whose term depends on ``K`` alone (``turn_penalty``, or
``dapo_overlong`` on :data:`TOKENS` model tokens a turn) shapes each trajectory as :func:`rllm_plugins.run.run_steps`
does (:func:`shaped`: the package's :class:`~rllm_plugins.shaping.stage.Shapers`, each trajectory's terms added to its
outcome and to its last step's reward), and :func:`true_gradient` is that of the shaped return, the term of each ``K``
the package's own (:func:`turn_terms`). A shaper whose term depends on the group (``length_penalty``: its pass rate
and its longest unit) or on the reward is refused there: the gradient of the expected shaped return is then no
per-trajectory target.

An estimate per task group of ``n`` trajectories is ``mean_i sum_t d log pi(a_t)/d theta * A_{i,t}`` over the
turns with a decision (``1 - p`` for continue, ``-p`` for stop), ``A`` the estimator's per-step advantages, no std
normalisation (it only rescales). The batch is verl's: each trajectory's outcome is its return, the sum of its
step rewards. An estimator that adds an outcome part and a per-turn part (``turn_grpo``, ``gigpo``) counts the
return twice, so its target is ``k * gradient`` with ``k`` the weight it gives the return (:data:`ROWS`); its bias
is ``mean - k * gradient``.

Run: ``python -m benchmarks.turn_baseline_bias``: prints the tables, writes ``docs/turn_baseline_bias.png`` and the
tables into ``docs/turn_level.md`` between its ``turn-baseline-bias`` markers.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from rllm_plugins.estimators.composite import composite
from rllm_plugins.estimators.gigpo import gigpo
from rllm_plugins.estimators.step_reinforce import step_reinforce
from rllm_plugins.estimators.turn_credit import turn_credit
from rllm_plugins.estimators.turn_gae import turn_gae
from rllm_plugins.estimators.turn_grpo import turn_grpo
from rllm_plugins.shaping import resolve_shapers, shape_rewards
from rllm_plugins.shaping.stage import Shapers
from rllm_plugins.steps.batch import StepBatch

__all__ = ["ROWS", "SETTINGS", "SHAPED", "Episodes", "Row", "bias", "markdown", "sample", "shaped", "table", "true_gradient", "turn_terms"]

HORIZON = 4
GROUP = 8
GROUPS = 20000
SEED = 0
CS = (0.0, 0.5, 1.0, 2.0)
SETTINGS = {"full": 1.0, "half": 0.5}  # payback fraction: the true gradient is 0 (full), not 0 (half)
TOKENS = 256  # model tokens a turn writes: a unit's length is TOKENS * K
Entries = tuple[tuple[str, dict[str, object]], ...]
SHAPED: dict[str, tuple[float, Entries]] = {  # payback fraction and reward shapers: the true gradient is the penalty's
    "turn_penalty": (1.0, (("turn_penalty", {"coef": 0.25, "free_turns": 1}),)),
    "dapo_overlong": (1.0, (("dapo_overlong", {"max_length": HORIZON * TOKENS, "buffer": 2 * TOKENS}),)),
}
WHERE = "reward_shapers"
ROOT = Path(__file__).resolve().parents[1]
PLOT = ROOT / "docs" / "turn_baseline_bias.png"
DOC = ROOT / "docs" / "turn_level.md"
BEGIN, END = "<!-- turn-baseline-bias: begin (python -m benchmarks.turn_baseline_bias) -->", "<!-- turn-baseline-bias: end -->"


@dataclass(frozen=True)
class Episodes:
    """``groups`` task groups of ``GROUP`` trajectories: the step batch and each step's score ``d log pi(a_t)/d theta``."""

    batch: StepBatch
    score: np.ndarray
    turn: np.ndarray  # (S,) 0-based turn index
    turns: np.ndarray  # (N,) turns taken
    c: float
    groups: int


def sample(c: float, groups: int, seed: int = SEED, theta: float = 0.0, payback: float = 1.0) -> Episodes:
    """Draw the episodes of the environment above (intermediate reward ``c``, a fraction ``payback`` paid back)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / (1.0 + np.exp(-theta))
    n = groups * GROUP
    cont = rng.random((n, HORIZON - 1)) < p
    turns = np.where(cont.all(axis=1), HORIZON, cont.argmin(axis=1) + 1)
    noise = rng.normal(size=n)
    step_offsets = np.concatenate([[0], np.cumsum(turns)])
    turn = np.arange(int(step_offsets[-1])) - np.repeat(step_offsets[:-1], turns)
    last = np.repeat(turns, turns) - 1
    rewards = np.where(turn < last, c, -payback * c * last + np.repeat(noise, turns))
    decided = turn <= HORIZON - 2  # the last possible turn has no decision
    score = np.where(turn < last, 1.0 - p, -p) * decided
    group_of_step = np.repeat(np.arange(n) // GROUP, turns)
    anchors = (group_of_step * HORIZON + turn).astype(np.int64)  # the state before a turn: every trajectory there has continued, so its turn index
    outcomes = np.add.reduceat(rewards, step_offsets[:-1])
    batch = StepBatch(outcomes, np.arange(0, n + 1, GROUP), rewards, step_offsets, anchors=anchors)
    return Episodes(batch, score, turn, turns, c, groups)


def shaped(e: Episodes, entries: Entries) -> Episodes:
    """The episodes as :func:`rllm_plugins.run.run_steps` hands them to the estimator under the reward shapers ``entries``:
    one unit per trajectory (its turns ``K``, its model tokens ``TOKENS * K``), shaped by the package's
    :class:`~rllm_plugins.shaping.stage.Shapers`, each trajectory's terms added to its outcome and to its last step's reward."""
    turns = e.turns.astype(np.float64)
    stage = Shapers(resolve_shapers(list(entries), WHERE), WHERE, context={"turns": turns, "lengths": TOKENS * turns})
    b = e.batch
    outcomes = stage.shape(b.outcomes, b.traj_offsets, "actor")
    step_rewards = b.step_rewards.copy()
    step_rewards[b.step_offsets[1:] - 1] += outcomes - b.outcomes  # every trajectory has a step
    return replace(e, batch=replace(b, outcomes=outcomes, step_rewards=step_rewards))


def turn_terms(entries: Entries, horizon: int = HORIZON) -> np.ndarray:
    """``(horizon,)``: the shaping term of a trajectory of ``K = 1..horizon`` turns (at ``K - 1``), from the package's
    shapers; refused (``ValueError``) for a term that moves with the reward or the group, which ``K`` alone does not give."""
    turns = np.arange(1.0, horizon + 1.0)

    def terms(rewards: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        return shape_rewards(rewards, list(entries), where=WHERE, offsets=offsets, turns=turns, lengths=TOKENS * turns)[0] - rewards

    alone = terms(np.zeros(horizon), np.arange(horizon + 1))
    together, varied = np.array([0, horizon]), np.linspace(-1.0, 2.0, horizon)
    for rewards, offsets in ((np.zeros(horizon), together), (np.ones(horizon), together), (varied, np.arange(horizon + 1)), (varied, together)):
        if not np.allclose(terms(rewards, offsets), alone, rtol=0.0, atol=1e-12):
            raise ValueError(f"{entries}: a term that depends on the reward or the group, not on the turns alone, has no exact gradient here")
    return alone


def true_gradient(c: float, payback: float, theta: float = 0.0, shapers: Entries = (), horizon: int = HORIZON) -> float:
    """``d E[return] / d theta``, exactly: the sum over the ``2^(H-1)`` continue/stop sequences of probability x score x mean
    return; with ``shapers`` the shaped return, each ``K``'s term from :func:`turn_terms`."""
    p = 1.0 / (1.0 + np.exp(-theta))
    term = turn_terms(shapers, horizon) if shapers else np.zeros(horizon)
    total = 0.0
    for actions in itertools.product((True, False), repeat=horizon - 1):
        probability = float(np.prod([p if a else 1.0 - p for a in actions]))
        score = sum((1.0 - p) if a else -p for a in actions)  # decisions after a stop are never taken: their scores average out
        turns = actions.index(False) + 1 if False in actions else horizon
        total += probability * score * ((1.0 - payback) * c * (turns - 1) + term[turns - 1])
    return total


def _broadcast(per_trajectory: np.ndarray, e: Episodes) -> np.ndarray:
    return np.repeat(per_trajectory, e.turns)


def rloo(e: Episodes) -> np.ndarray:
    returns = e.batch.outcomes.reshape(e.groups, GROUP)
    return _broadcast((GROUP / (GROUP - 1) * (returns - returns.mean(axis=1, keepdims=True))).ravel(), e)


def per_turn_index_sum(e: Episodes) -> np.ndarray:
    """The RFC's construction: sum over the trajectory's turns of (reward - its turn index's mean over the trajectories that reached it)."""
    key = e.batch.anchors
    count = np.bincount(key, minlength=e.groups * HORIZON)
    mean = (np.bincount(key, e.batch.step_rewards, minlength=e.groups * HORIZON) / np.maximum(count, 1))[key]
    return _broadcast(np.add.reduceat(e.batch.step_rewards - mean, e.batch.step_offsets[:-1]), e)


def credit(e: Episodes) -> np.ndarray:
    """``turn_credit``: the outcome is the return; the score after each turn is the intermediate reward earned so far (``c`` per
    turn after which the policy continued; the final payback is part of the return, not of the state's score)."""
    earned = np.where(e.turn < np.repeat(e.turns, e.turns) - 1, e.c * (e.turn + 1), e.c * (np.repeat(e.turns, e.turns) - 1))
    scored = StepBatch(e.batch.outcomes, e.batch.traj_offsets, earned.astype(np.float64), e.batch.step_offsets)
    return turn_credit(scored, gamma=1.0, beta=1.0)


def one_anchor(e: Episodes) -> StepBatch:
    """The batch with one anchor state per task group: an observation that does not show the turn."""
    b = e.batch
    return StepBatch(b.outcomes, b.traj_offsets, b.step_rewards, b.step_offsets, anchors=b.step_group.astype(np.int64))


def no_critic(e: Episodes) -> np.ndarray:
    """``turn_gae`` with every value 0 (no critic), ``lam=1``, not whitened: each step's return-to-go."""
    b = e.batch
    batch = StepBatch(b.outcomes, b.traj_offsets, b.step_rewards, b.step_offsets, step_values=np.zeros(b.num_steps))
    return turn_gae(batch, gamma=1.0, lam=1.0, whiten=False)[0]


NO_STD = {"norm_adv_by_std_in_grpo": False}


@dataclass(frozen=True)
class Row:
    """An estimator in a setting: its advantages ``(S,)`` and the weight ``k`` it gives the return (its target: ``k * gradient``)."""

    name: str
    advantages: Callable[[Episodes], np.ndarray]
    k: float


ROWS = (
    Row("rloo (return)", rloo, 1.0),
    Row("RFC's construction (per-turn-index sum)", per_turn_index_sum, 1.0),
    Row('turn_grpo value="reward" ended="present" (MT-GRPO)', lambda e: turn_grpo(e.batch, **NO_STD, value="reward", ended="present"), 2.0),
    Row('turn_grpo value="reward" ended="absorbing"', lambda e: turn_grpo(e.batch, **NO_STD, value="reward"), 2.0),
    Row('turn_grpo value="return" ended="absorbing" (default)', lambda e: turn_grpo(e.batch, **NO_STD), 2.0),
    Row('turn_grpo value="return" ended="present"', lambda e: turn_grpo(e.batch, **NO_STD, ended="present"), 2.0),
    Row('turn_grpo value="reward_to_go"', lambda e: turn_grpo(e.batch, **NO_STD, value="reward_to_go"), 2.0),
    Row(
        'turn_grpo value="reward_to_go" baseline="leave_one_out" (RFC\'s criterion)',
        lambda e: turn_grpo(e.batch, **NO_STD, value="reward_to_go", baseline="leave_one_out"),
        2.0,
    ),
    Row("gigpo, anchor = turn index = state (gamma=1)", lambda e: gigpo(e.batch, **NO_STD), 2.0),
    Row("gigpo, anchor = turn index (gamma=0)", lambda e: gigpo(e.batch, **NO_STD, gamma=0.0), 2.0),
    Row("gigpo, one anchor state for every turn", lambda e: gigpo(one_anchor(e), **NO_STD), 2.0),
    Row('step_reinforce method="mean"', lambda e: step_reinforce(e.batch, **NO_STD, method="mean"), 1.0),
    Row("turn_gae, no critic (V=0, lam=1, whiten=False)", no_critic, 1.0),
    Row("turn_credit (score: intermediate reward so far)", credit, 1.0),
    Row("composite 0.5 grpo + 0.5 turn_grpo", lambda e: composite(e.batch, **NO_STD, terms=[["grpo", 0.5], ["turn_grpo", 0.5]]), 1.5),
)


def bias(e: Episodes, advantages: np.ndarray, target: float) -> tuple[float, float]:
    """Mean gradient estimate per task group minus ``target``, and its standard error."""
    per_trajectory = np.add.reduceat(e.score * advantages, e.batch.step_offsets[:-1])
    per_group = per_trajectory.reshape(e.groups, GROUP).mean(axis=1)
    return float(per_group.mean() - target), float(per_group.std(ddof=1) / np.sqrt(e.groups))


def settings() -> dict[str, tuple[float, Entries]]:
    """Every setting: :data:`SETTINGS` unshaped, then :data:`SHAPED`, as ``{name: (payback, shapers)}``."""
    return {**{name: (payback, ()) for name, payback in SETTINGS.items()}, **SHAPED}


def table(groups: int = GROUPS, seed: int = SEED, cs: tuple[float, ...] = CS) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """``{setting: {row name: [(bias, standard error) per c]}}``; the same draws for every setting and ``c``."""
    out: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for setting, (payback, entries) in settings().items():
        out[setting] = {row.name: [] for row in ROWS}
        for c in cs:
            e = sample(c, groups, seed, payback=payback)
            e = shaped(e, entries) if entries else e
            truth = true_gradient(c, payback, shapers=entries)
            for row in ROWS:
                out[setting][row.name].append(bias(e, row.advantages(e), row.k * truth))
    return out


def describe(entries: Entries) -> str:
    """``turn_penalty(coef=0.25, free_turns=1)``: the shapers as the tables name them."""
    return " + ".join(f"`{name}({', '.join(f'{k}={v}' for k, v in options.items())})`" for name, options in entries)


def markdown(results: dict[str, dict[str, list[tuple[float, float]]]], cs: tuple[float, ...] = CS) -> str:
    """The tables of docs/turn_level.md (bias ± one standard error), with the exact gradient where it is not 0."""
    head = "| estimator | k | " + " | ".join(f"c = {c:g}" for c in cs) + " |\n|---|---|" + "---|" * len(cs) + "\n"
    parts = []
    for setting, (payback, entries) in settings().items():
        if entries:
            title = f"Payback {payback:g}, shaped by {describe(entries)} (the true gradient is the shaped return's)"
        else:
            title = "Full payback (the true gradient is 0)" if payback == 1.0 else f"Payback {payback:g} (the true gradient is not 0)"
        lines = [f"**{title}.** Bias = mean - k * gradient:\n\n", head]
        if payback != 1.0 or entries:
            lines.append("| *exact gradient* | | " + " | ".join(f"{true_gradient(c, payback, shapers=entries):+.4f}" for c in cs) + " |\n")
        for row in ROWS:
            cells = " | ".join(f"{b:+.4f} ± {s:.4f}" for b, s in results[setting][row.name])
            lines.append(f"| {row.name} | {row.k:g} | {cells} |\n")
        parts.append("".join(lines))
    return "\n".join(parts)


def write_doc(text: str, path: Path = DOC) -> None:
    """Replace what lies between the page's markers with ``text``."""
    page = path.read_text()
    before, rest = page.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    path.write_text(f"{before}{BEGIN}\n{text}{END}{after}")


def save_plot(results: dict[str, dict[str, list[tuple[float, float]]]], path: Path, cs: tuple[float, ...] = CS) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 7.5), sharey=True)
    colours = plt.get_cmap("tab20").colors
    for ax, (setting, payback) in zip(axes, SETTINGS.items(), strict=True):
        for k, row in enumerate(ROWS):
            points = results[setting][row.name]
            ax.errorbar(
                cs,
                [b for b, _ in points],
                yerr=[2 * s for _, s in points],
                marker="os^vD"[k % 5],
                linestyle=("-", "--", ":")[k % 3],
                color=colours[k % len(colours)],
                capsize=3,
                label=row.name,
            )
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.set_xlabel("intermediate reward c per extra turn")
        ax.set_title(f"payback {payback:g}: " + ("true gradient 0" if payback == 1.0 else f"true gradient {1 - payback:g} x 0.6875 c"))
    axes[0].set_ylabel("bias: mean estimate - k x true gradient (± 2 s.e.)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=7)
    fig.suptitle(f"Learned stopping: {HORIZON} turns at most, groups of {GROUP}, p(continue) = 0.5, {GROUPS:,} task groups")
    fig.tight_layout(rect=(0, 0.17, 1, 1))
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 task groups per point instead of 20,000 (prints; writes nothing)")
    args = parser.parse_args(argv)
    results = table(groups=2000 if args.quick else GROUPS)
    text = markdown(results)
    print(text)
    if not args.quick:
        write_doc(text)
        save_plot(results, PLOT)
        print(f"wrote {DOC} and {PLOT}")


if __name__ == "__main__":
    main()
