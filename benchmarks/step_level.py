"""Step level: batched ``gigpo`` vs a per-step Python loop, the collector's cost per step, and ``rllm_gigpo`` in verl.

- **core**: ``gigpo``'s batched form on a :class:`~rllm_plugins.steps.batch.StepBatch` against the same
  numbers computed the way verl-agent's ``gigpo/core_gigpo.py`` organises them: a backward loop of
  discounted returns per trajectory, then dicts from anchor state to the returns of its steps, mean
  and std per anchor group, one step at a time (its per-step work written in Python, as there).
  Both include building anchor ids from hashable states (the loop: its dicts; ours: ``anchor_ids``).
- **catalogue**: the step-level built-ins' batched forms on one prebuilt :class:`~rllm_plugins.steps.batch.StepBatch`
  (anchor ids included), each against ``gigpo``: ``turn_grpo``, ``step_reinforce``, ``composite`` of batched
  terms, ``turn_gae`` (with a critic's value and a token count per step); and ``gigpo(anchor_similarity=0.95)``
  on text observations (pairwise ``SequenceMatcher`` comparisons); ``composite`` of ``gigpo`` and ``grpo`` against
  the two terms called alone (its own overhead).
- **collector**: ``collect_reward_and_advantage_from_trajectory_groups`` with ``gigpo`` on
  ``Trajectory``/``Step`` objects, per step.
- **verl**: ``compute_advantage`` with each step-level ``rllm_*`` estimator vs its own numpy passes over the (B, T)
  arrays (:data:`ESTIMATOR_PASSES`), beside ``rllm_grpo`` and the floor of bytes both levels move, on one multi-turn
  CPU DataProto (2-10 turns per row, environment segments drawn from a small vocabulary so states repeat).

Peak memory: ``tracemalloc`` (numpy and Python objects) plus the torch profiler for verl.
Run: ``python -m benchmarks.step_level [--quick]``.
"""

from __future__ import annotations

import copy
import itertools
import logging
import statistics
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

from .report import Report, Target, script_main
from .timing import Table, format_bytes, format_ratio, format_time, measure_interleaved, page_faults_per_call

__all__ = ["CATALOGUE_TARGETS", "loop_gigpo", "make_steps", "run"]

TARGET_VS_LOOP = 20.0
TARGET_VERL_VS_PASSES = 1.3  # a step-level estimator vs its numpy passes over (B, T), as an outcome one vs its floor
VERL_STEP_LEVEL = ("rllm_gigpo", "rllm_turn_grpo", "rllm_turn_gae", "rllm_step_reinforce")
TARGET_VERL_MEMORY = 2.0
TARGET_VS_GIGPO = 1.5
TARGET_COMPOSITE = 1.3  # composite vs the sum of its terms' own calls
CATALOGUE_TARGETS = ("turn_grpo (ended='absorbing')", "composite (0.5 grpo + 0.5 turn_grpo)", "turn_gae (gamma=0.95, lam=0.95, whitened)")
EPS = 1e-6


def make_steps(groups: int, per_group: int, max_steps: int, seed: int = 0) -> tuple[np.ndarray, list[list[float]], list[list[str]]]:
    """Outcomes ``(G * n,)``, per-trajectory step rewards and anchor states (1..max_steps steps, states from 6 per task)."""
    rng = np.random.default_rng(seed)
    n = groups * per_group
    lengths = rng.integers(1, max_steps + 1, n)
    outcomes = rng.integers(0, 2, n).astype(np.float64)
    rewards = [rng.choice([0.0, 0.1], int(k)).tolist() for k in lengths]
    states = [[f"s{int(x)}" for x in rng.integers(0, 6, int(k))] for k in lengths]
    return outcomes, rewards, states


def loop_gigpo(outcomes: np.ndarray, rewards: list[list[float]], states: list[list[str]], per_group: int, gamma: float = 0.95) -> list[float]:
    """GiGPO one step at a time with dicts, verl-agent's way (rLLM-native statistics: population std)."""
    out: list[float] = []
    for g in range(len(outcomes) // per_group):
        members = range(g * per_group, (g + 1) * per_group)
        scores = [float(outcomes[i]) for i in members]
        mean, std = statistics.fmean(scores), statistics.pstdev(scores)
        returns: dict[int, list[float]] = {}
        by_anchor: dict[str, list[float]] = {}
        for i in members:
            running, traj = 0.0, [0.0] * len(rewards[i])
            for t in reversed(range(len(rewards[i]))):
                running = rewards[i][t] + gamma * running
                traj[t] = running
            returns[i] = traj
            for t, state in enumerate(states[i]):
                by_anchor.setdefault(state, []).append(traj[t])
        stats = {a: (statistics.fmean(v), statistics.pstdev(v), len(v)) for a, v in by_anchor.items()}
        for i in members:
            episode = (outcomes[i] - mean) / (std + EPS)
            for t, state in enumerate(states[i]):
                m, s, size = stats[state]
                step = 0.0 if size == 1 else (returns[i][t] - m) / (s + EPS)
                out.append(episode + step)
    return out


def step_batch(outcomes: np.ndarray, rewards: list[list[float]], states: list[list[str]], per_group: int) -> Any:
    """The :class:`StepBatch` of :func:`make_steps`' output, anchor ids (and the states) included."""
    from rllm_plugins.steps import StepBatch
    from rllm_plugins.steps.anchors import anchor_ids

    lengths = np.fromiter(map(len, rewards), dtype=np.int64, count=len(rewards))
    step_offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=step_offsets[1:])
    step_group = np.repeat(np.arange(lengths.size) // per_group, lengths)
    flat_states = list(itertools.chain.from_iterable(states))
    anchors = anchor_ids(flat_states, step_group, str)
    traj_offsets = np.arange(0, outcomes.size + 1, per_group, dtype=np.int64)
    step_rewards = np.fromiter(itertools.chain.from_iterable(rewards), dtype=np.float64, count=int(step_offsets[-1]))
    return StepBatch(outcomes, traj_offsets, step_rewards, step_offsets, anchors, flat_states)


def batched_gigpo(outcomes: np.ndarray, rewards: list[list[float]], states: list[list[str]], per_group: int, gamma: float = 0.95) -> np.ndarray:
    """The library: anchor ids from the states, then the batched estimator."""
    from rllm_plugins.estimators import gigpo
    from rllm_plugins.steps import StepBatch
    from rllm_plugins.steps.anchors import anchor_ids

    lengths = np.fromiter(map(len, rewards), dtype=np.int64, count=len(rewards))
    step_offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=step_offsets[1:])
    step_group = np.repeat(np.arange(lengths.size) // per_group, lengths)
    anchors = anchor_ids(list(itertools.chain.from_iterable(states)), step_group, str)
    traj_offsets = np.arange(0, outcomes.size + 1, per_group, dtype=np.int64)
    step_rewards = np.fromiter(itertools.chain.from_iterable(rewards), dtype=np.float64, count=int(step_offsets[-1]))
    batch = StepBatch(outcomes, traj_offsets, step_rewards, step_offsets, anchors)
    return gigpo(batch, gamma=gamma)


def peak_bytes(fn: Callable[[], object]) -> int:
    """Peak bytes ``tracemalloc`` traces during ``fn()`` (numpy's buffers and Python objects; torch's are not seen)."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _core(report: Report, quick: bool) -> None:
    groups, per_group, max_steps = (200, 8, 10) if quick else (10_000, 8, 10)
    outcomes, rewards, states = make_steps(groups, per_group, max_steps)
    steps = sum(len(r) for r in rewards)
    got = batched_gigpo(outcomes, rewards, states, per_group)
    want = loop_gigpo(outcomes, rewards, states, per_group)
    assert np.allclose(got, want, rtol=1e-9, atol=1e-9), "batched gigpo and the loop disagree"
    impls = {
        "per-step Python loop (verl-agent's way)": lambda: loop_gigpo(outcomes, rewards, states, per_group),
        "batched gigpo (anchor ids + estimator)": lambda: batched_gigpo(outcomes, rewards, states, per_group),
    }
    times = measure_interleaved(impls, 1 if quick else 3, 0.0 if quick else 2.0, 1 if quick else 3)
    table = Table(
        f"core: gigpo on {groups:,} task groups x {per_group} trajectories x 1-{max_steps} steps ({steps:,} steps)",
        ["implementation", "time", "per step", "peak memory"],
    )
    for name, fn in impls.items():
        table.add(name, format_time(times[name]), format_time(times[name] / steps), format_bytes(peak_bytes(fn)))
    report.tables.append(table)
    speedup = times["per-step Python loop (verl-agent's way)"] / times["batched gigpo (anchor ids + estimator)"]
    report.targets.append(
        Target.check(
            f"batched gigpo vs per-step loop at {groups:,} groups",
            speedup,
            TARGET_VS_LOOP,
            at_most=False,
            measured=f"{format_ratio(speedup)} faster",
            quick=quick,
        )
    )
    _collector(report, outcomes, rewards, states, per_group, quick)
    batch = step_batch(outcomes, rewards, states, per_group)
    _catalogue(report, batch, quick)
    _composite_overhead(report, batch, quick)
    _similarity(report, quick)


def _catalogue(report: Report, batch: Any, quick: bool) -> None:
    """Each step-level built-in's batched form on the same batch, against gigpo's."""
    from rllm_plugins.estimators import composite, gigpo, step_reinforce, turn_gae, turn_grpo
    from rllm_plugins.steps import StepBatch

    terms = [["grpo", 0.5], ["turn_grpo", 0.5]]
    rng = np.random.default_rng(1)
    valued = StepBatch(
        batch.outcomes,
        batch.traj_offsets,
        batch.step_rewards,
        batch.step_offsets,
        step_values=rng.normal(size=batch.num_steps),
        step_tokens=rng.integers(1, 200, batch.num_steps).astype(np.float64),
    )
    impls = {
        "gigpo": lambda: gigpo(batch, gamma=0.95),
        "turn_grpo (ended='absorbing')": lambda: turn_grpo(batch, gamma=0.95),
        "turn_grpo (ended='present')": lambda: turn_grpo(batch, gamma=0.95, ended="present"),
        "step_reinforce": lambda: step_reinforce(batch, gamma=0.95),
        "step_reinforce (ROLL's mean_std: std_ddof=1, min_std=1e-6)": lambda: step_reinforce(batch, gamma=0.95, std_ddof=1, min_std=1e-6),
        "composite (0.5 grpo + 0.5 turn_grpo)": lambda: composite(batch, gamma=0.95, terms=terms),
        "turn_gae (gamma=0.95, lam=0.95, whitened)": lambda: turn_gae(valued, gamma=0.95, lam=0.95),
    }
    times = measure_interleaved(impls, 1 if quick else 3, 0.0 if quick else 2.0, 1 if quick else 5)
    table = Table(
        f"catalogue: batched forms on one StepBatch of {batch.num_groups:,} task groups ({batch.num_steps:,} steps)",
        ["estimator", "time", "per step", "vs gigpo"],
    )
    for name in impls:
        table.add(name, format_time(times[name]), format_time(times[name] / batch.num_steps), format_ratio(times[name] / times["gigpo"]))
    report.tables.append(table)
    for name in CATALOGUE_TARGETS:
        ratio = times[name] / times["gigpo"]
        report.targets.append(Target.check(f"{name} vs gigpo", ratio, TARGET_VS_GIGPO, quick=quick))


COMPOSITE_VS_TERMS = "composite (gigpo + grpo) vs gigpo + grpo called alone"


def _composite_overhead(report: Report, batch: Any, quick: bool) -> None:
    """``composite`` of an anchored term and an outcome term against the sum of the terms' own calls on the same batch."""
    from rllm_plugins.estimators import composite, gigpo, grpo

    terms = [["gigpo", 1.0, {"gamma": 0.95}], ["grpo", 2.0]]
    impls = {
        "gigpo": lambda: gigpo(batch, gamma=0.95),
        "grpo (outcome level, on the trajectories)": lambda: grpo(batch.outcomes, batch.traj_offsets),
        "composite (gigpo + 2 grpo)": lambda: composite(batch, terms=terms),
    }
    expected = gigpo(batch, gamma=0.95) + 2.0 * batch.steps.expand(grpo(batch.outcomes, batch.traj_offsets))
    assert np.array_equal(composite(batch, terms=terms), expected), "composite and the sum of its terms disagree"
    times = measure_interleaved(impls, 1 if quick else 3, 0.0 if quick else 2.0, 1 if quick else 5)
    terms_alone = times["gigpo"] + times["grpo (outcome level, on the trajectories)"]
    table = Table(f"composite: an anchored and an outcome term on one StepBatch ({batch.num_steps:,} steps)", ["call", "time", "vs the terms alone"])
    for name in impls:
        table.add(name, format_time(times[name]), format_ratio(times[name] / terms_alone))
    report.tables.append(table)
    ratio = times["composite (gigpo + 2 grpo)"] / terms_alone
    report.targets.append(Target.check(COMPOSITE_VS_TERMS, ratio, TARGET_COMPOSITE, quick=quick))


def make_text_steps(groups: int, per_group: int, max_steps: int, seed: int = 0) -> tuple[np.ndarray, list[list[float]], list[list[str]]]:
    """As :func:`make_steps`, with text observations (~80 characters) that differ from one of 6 per task by a few characters."""
    outcomes, rewards, _ = make_steps(groups, per_group, max_steps, seed)
    rng = np.random.default_rng(seed + 1)
    rooms = [f"You are in room {r}. You see a table, a lamp and a closed door to the north. Turn {r}." for r in range(6)]
    states = []
    for traj in rewards:
        picks = rng.integers(0, 6, len(traj))
        noise = rng.integers(0, 4, len(traj))  # 0-3 characters replaced
        states.append([rooms[int(p)][: 80 - int(k)] + "x" * int(k) for p, k in zip(picks, noise, strict=True)])
    return outcomes, rewards, states


def _similarity(report: Report, quick: bool) -> None:
    """gigpo with anchor_similarity=0.95 (verl-agent's similarity grouping) vs equal states only, on text observations."""
    from rllm_plugins.estimators import gigpo

    groups, per_group, max_steps = (50, 8, 10) if quick else (1_000, 8, 10)
    batch = step_batch(*make_text_steps(groups, per_group, max_steps), per_group)
    impls = {"gigpo, equal states": lambda: gigpo(batch, gamma=0.95), "gigpo, anchor_similarity=0.95": lambda: gigpo(batch, gamma=0.95, anchor_similarity=0.95)}
    times = measure_interleaved(impls, 1, 0.0 if quick else 1.0, 1 if quick else 3)
    distinct = int(np.unique(batch.anchors).size)
    table = Table(
        f"similarity anchors: {groups:,} task groups x {per_group} trajectories x 1-{max_steps} steps ({batch.num_steps:,} steps, "
        f"{distinct:,} distinct states, ~80 characters)",
        ["anchors", "time", "per task group", "vs equal states"],
    )
    for name in impls:
        table.add(name, format_time(times[name]), format_time(times[name] / groups), format_ratio(times[name] / times["gigpo, equal states"]))
    report.tables.append(table)


def _collector(report: Report, outcomes: np.ndarray, rewards: list[list[float]], states: list[list[str]], per_group: int, quick: bool) -> None:
    from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups

    groups = min(len(outcomes) // per_group, 200 if quick else 2_000)
    built = [
        TrajectoryGroup(
            [
                Trajectory(steps=[Step(reward=r, observation=s) for r, s in zip(rewards[i], states[i], strict=True)], reward=float(outcomes[i]))
                for i in range(g * per_group, (g + 1) * per_group)
            ],
            group_id=f"task{g}:agent",
        )
        for g in range(groups)
    ]
    steps = sum(len(t.steps) for grp in built for t in grp.trajectories)
    config = AlgorithmConfig(estimator="gigpo", estimator_kwargs={"gamma": 0.95})
    outcome_config = AlgorithmConfig(estimator="grpo")
    built_twice = copy.deepcopy(built)  # each configuration on its own objects: no advantages left by the other
    impls: dict[str, Callable[[], object]] = {
        "collector, gigpo (one advantage per step)": lambda: collect_reward_and_advantage_from_trajectory_groups(built, config),
        "collector, grpo (broadcast)": lambda: collect_reward_and_advantage_from_trajectory_groups(built_twice, outcome_config),
    }
    quiet = logging.getLogger("rllm_plugins.advantage")  # repeated runs see the advantages of the previous one and would say so
    level, _ = quiet.level, quiet.setLevel(logging.ERROR)
    try:
        times = measure_interleaved(impls, 1 if quick else 3, 0.0 if quick else 1.0, 1 if quick else 3)
    finally:
        quiet.setLevel(level)
    table = Table(f"core: the collector on {groups:,} task groups ({steps:,} steps)", ["collection", "time", "per step", "peak memory"])
    for name, fn in impls.items():
        table.add(name, format_time(times[name]), format_time(times[name] / steps), format_bytes(peak_bytes(fn)))
    report.tables.append(table)


def make_multi_turn_dataproto(rows: int, length: int, n: int, seed: int = 0) -> Any:
    """A verl DataProto of multi-turn rows: 2-10 turns, each 8-40 model tokens then 4-16 environment tokens from 4 segments."""
    import torch
    from verl import DataProto

    rng = np.random.default_rng(seed)
    segments = [rng.integers(0, 1000, int(k)) for k in rng.integers(4, 17, 4)]
    responses = np.zeros((rows, length), dtype=np.int64)
    mask = np.zeros((rows, length), dtype=np.int64)
    rewards = np.zeros((rows, length), dtype=np.float32)
    for r in range(rows):
        pos = 0
        for _ in range(int(rng.integers(2, 11))):
            k = int(rng.integers(8, 41))
            if pos + k > length:
                break
            mask[r, pos : pos + k] = 1
            responses[r, pos : pos + k] = rng.integers(1000, 2000, k)
            rewards[r, pos + k - 1] = float(rng.integers(0, 2))
            pos += k
            env = segments[int(rng.integers(0, 4))]
            end = min(pos + env.size, length)
            responses[r, pos:end] = env[: end - pos]
            pos = end
    uid = np.repeat(np.array([f"prompt-{i}" for i in range(rows // n)], dtype=object), n)
    values = torch.from_numpy(rng.standard_normal((rows, length), dtype=np.float32))  # a critic's, for turn_gae
    tensors = {"responses": torch.from_numpy(responses), "response_mask": torch.from_numpy(mask), "token_level_rewards": torch.from_numpy(rewards)}
    return DataProto.from_dict(tensors={**tensors, "values": values}, non_tensors={"uid": uid})


PARTS_PREFIX = "part"
PASSES_PREFIX = "passes"
FLOOR_ROW = "floor: the bytes (mask and rewards summed, one output filled)"
TURN_PASSES = ("find_turns", "turn_rewards", "spread_to_tokens")  # every step-level estimator's passes over (B, T) arrays
ESTIMATOR_PASSES = {  # rllm_gigpo codes anchor states too; a value-based estimator spreads its returns apart from its advantages
    "rllm_gigpo": ("find_turns", "turn_rewards", "turn_anchor_codes", "spread_to_tokens"),
    "rllm_turn_grpo": TURN_PASSES,
    "rllm_turn_gae": (*TURN_PASSES, "spread_to_tokens"),
    "rllm_step_reinforce": TURN_PASSES,
}
PART_ROLES = {
    "find_turns": "the mask read",
    "turn_rewards": "the rewards read",
    "turn_anchor_codes": "the environment tokens read",
    "spread_to_tokens": "the output written",
}


def passes_row(name: str) -> str:
    """The table row of ``name``'s numpy passes, timed together (one row per distinct sequence of passes)."""
    return f"{PASSES_PREFIX}: {' + '.join(ESTIMATOR_PASSES[name])}"


def step_parts(data: Any) -> dict[str, Callable[[], object]]:
    """The numpy passes of verl's step level over ``data``'s (B, T) tensors (:mod:`rllm_plugins.steps.turns`): each alone, each
    estimator's in a row (:data:`ESTIMATOR_PASSES`, turns found again on every call as the estimators do), and the floor every
    path shares: the mask and the rewards read once, one float32 output written."""
    from rllm_plugins.steps.turns import find_turns, spread_to_tokens, turn_anchor_codes, turn_rewards

    mask, rewards, responses = (data.batch[key].numpy() for key in ("response_mask", "token_level_rewards", "responses"))
    turns = find_turns(mask)
    per_turn = turn_rewards(rewards, turns)
    alone = {
        "find_turns": lambda: find_turns(mask),
        "turn_rewards": lambda: turn_rewards(rewards, turns),
        "turn_anchor_codes": lambda: turn_anchor_codes(responses, turns),
        "spread_to_tokens": lambda: spread_to_tokens(per_turn, turns),
    }

    steps: dict[str, Callable[[dict[str, Any]], None]] = {  # each pass on what the passes before it found
        "find_turns": lambda found: found.update(turns=find_turns(mask)),
        "turn_rewards": lambda found: found.update(sums=turn_rewards(rewards, found["turns"])),
        "turn_anchor_codes": lambda found: found.update(codes=turn_anchor_codes(responses, found["turns"])),
        "spread_to_tokens": lambda found: found["outputs"].append(spread_to_tokens(found["sums"], found["turns"])),
    }
    kept: dict[str, object] = {}  # a row's outputs live until its next call has made its own, as data.batch keeps verl's

    def passes(row: str, names: tuple[str, ...]) -> Callable[[], object]:
        def run() -> object:
            found: dict[str, Any] = {"outputs": []}
            for name in names:
                steps[name](found)
            kept[row] = found["outputs"]
            return found["outputs"]

        return run

    def floor() -> object:
        mask.sum()
        rewards.sum()
        output = np.empty(mask.shape, dtype=np.float32)  # fresh memory, as every path's output
        output.fill(1.0)
        return output

    parts: dict[str, Callable[[], object]] = {f"{PARTS_PREFIX}: {name} ({PART_ROLES[name]})": fn for name, fn in alone.items()}
    parts.update({passes_row(name): passes(passes_row(name), names) for name, names in ESTIMATOR_PASSES.items()})  # equal passes: one row
    parts[FLOOR_ROW] = floor
    return parts


def _verl(report: Report, quick: bool) -> None:
    from omegaconf import OmegaConf
    from verl.trainer.ppo.ray_trainer import compute_advantage

    from .verl_advantage import _rllm_available, peak_extra_memory

    if not _rllm_available():
        report.targets.append(Target.unavailable("rllm_gigpo in verl", "rllm_verl not available", "registered"))
        return
    rows, length, n = (256, 256, 8) if quick else (4096, 2048, 8)
    data = make_multi_turn_dataproto(rows, length, n)
    config = OmegaConf.create({"adv_estimator": "rllm_gigpo", "norm_adv_by_std_in_grpo": True, "gamma": 0.95, "lam": 1.0})
    impls = {name: (lambda name=name: compute_advantage(data, adv_estimator=name, config=config)) for name in ("rllm_grpo", *VERL_STEP_LEVEL)}
    parts = step_parts(data)
    times = measure_interleaved({**impls, **parts}, 1 if quick else 3, 0.0 if quick else 3.0, 1 if quick else 5)
    output = rows * length * 4
    table = Table(
        f"verl: compute_advantage on {rows:,} multi-turn rows x {length:,} tokens (n={n}, 2-10 turns)",
        ["estimator", "time", "vs rllm_grpo", "vs its passes", "vs the floor", "page faults per call", "peak extra memory", "vs (B,T) output"],
    )
    faults = {name: f"{page_faults_per_call(fn):,.0f}" for name, fn in {**impls, **parts}.items()}  # before the profiler runs
    peaks = {}
    for name, fn in impls.items():
        for key in ("advantages", "returns"):
            data.batch.pop(key, None)
        peaks[name] = peak_extra_memory(fn)[0]
    for name in (*impls, *parts):
        memory = (format_bytes(peaks[name]), format_ratio(peaks[name] / output)) if name in peaks else ("—", "—")
        own = format_ratio(times[name] / times[passes_row(name)]) if name in ESTIMATOR_PASSES else "—"
        vs_floor = format_ratio(times[name] / times[FLOOR_ROW])
        table.add(name, format_time(times[name]), format_ratio(times[name] / times["rllm_grpo"]), own, vs_floor, faults[name], *memory)
    table.notes.append(
        f"(B,T) float32 output: {format_bytes(output)}; turns, turn rewards and anchor states (environment token bytes) are found on every call."
    )
    table.notes.append(
        f"{PARTS_PREFIX}: a numpy function the step level calls on (B, T) arrays (rllm_plugins.steps.turns), timed alone; "
        f"{PASSES_PREFIX}: an estimator's calls of them in a row, as it makes them (turns found, turn rewards summed, anchor states coded "
        "for rllm_gigpo only, each output spread: rllm_turn_gae returns the critic's targets apart from its advantages), with no "
        "estimator and no check. Each step-level estimator is held to its passes (vs its passes), as each outcome one is to its floor."
    )
    table.notes.append(
        f"{FLOOR_ROW}: the bytes both levels move, each at numpy's speed: the mask (int64) and the rewards read once, one float32 "
        "output written to fresh memory. rllm_grpo reads the mask and writes its output in one torch cast per block; the step level "
        "must find the turns (a read of the mask comparing entries, then the positions of the changes) before its estimator can "
        "give the values it writes, so its mask read is a pass of its own, not fused with the write."
    )
    table.notes.append(
        "page faults per call: pages first touched by a call (fresh memory from the kernel: 4 KiB, or 2 MiB with huge pages). "
        "Whether a (B,T) output is fresh depends on the process's allocator history; where it is, every row pays it once."
    )
    report.tables.append(table)
    memory = peaks["rllm_gigpo"] / output
    for name in VERL_STEP_LEVEL:
        ratio = times[name] / times[passes_row(name)]
        report.targets.append(Target.check(f"{name} vs its numpy passes at {rows:,} x {length:,}", ratio, TARGET_VERL_VS_PASSES, quick=quick))
    report.targets.append(Target.check("rllm_gigpo peak memory vs the (B,T) output", memory, TARGET_VERL_MEMORY, quick=quick))


def _trl(report: Report, quick: bool) -> None:
    """TRL's advantage step on the gathered batch: the step-level path (turns, anchors, gigpo, (B, T) spread) vs the outcome path."""
    import torch
    from rllm_trl.outcome import compute_advantages, prepare_batch
    from rllm_trl.turns import local_turns, row_turns, spread_local, step_advantages

    rows, length, n = (256, 256, 8) if quick else (4096, 2048, 8)
    data = make_multi_turn_dataproto(rows, length, n)
    tool_mask = data.batch["response_mask"].numpy()
    completion_ids = data.batch["responses"].numpy()
    ends = np.where(tool_mask.any(axis=1), length - np.argmax(tool_mask[:, ::-1], axis=1), 0)
    completion_mask = (np.arange(length)[None, :] < ends[:, None]).astype(np.int64)  # the completion: model and environment tokens
    rewards = torch.from_numpy(np.random.default_rng(1).integers(0, 2, (rows, 1)).astype(np.float32))
    weights = torch.ones(1)
    prompt_ids = np.repeat(np.arange(rows // n), n)[:, None] * np.ones((1, 64), dtype=np.int64)  # 64-token prompts, one per group
    prompt_mask = np.ones_like(prompt_ids)

    def outcome() -> object:
        batch = prepare_batch(rewards, weights, n)
        return torch.as_tensor(compute_advantages(batch, "grpo"), dtype=torch.float32)

    def outcome_tokens() -> object:
        per_row = outcome().numpy()
        out = np.empty(tool_mask.shape, dtype=np.float32)  # what any (B, T) output costs at least: the mask cast in, then scaled
        out[...] = tool_mask  # in numpy's memory, as the step-level path's output (torch's would fault once per 4 KiB page)
        out *= per_row[:, None]
        return torch.from_numpy(out)

    def step() -> object:
        batch = prepare_batch(rewards, weights, n)
        turns = local_turns(completion_mask, tool_mask)
        described = row_turns(completion_ids, completion_mask, turns, None, with_anchors=True, prompt_ids=prompt_ids, prompt_mask=prompt_mask)
        result = step_advantages(described, batch.rewards, n, "gigpo", {"gamma": 0.95, "norm_adv_by_std_in_grpo": True})
        return torch.from_numpy(spread_local(result, described, 0, turns))

    impls = {"outcome path, grpo, (B,)": outcome, "outcome path + one (B,T) write": outcome_tokens, "step-level path, gigpo, (B,T)": step}
    times = measure_interleaved(impls, 1 if quick else 3, 0.0 if quick else 2.0, 1 if quick else 3)
    title = f"TRL: the advantage step on {rows:,} gathered multi-turn completions x {length:,} tokens (n={n}, 2-10 turns)"
    table = Table(title, ["path", "time", "vs outcome (B,)", "vs outcome + (B,T) write"])
    for name in impls:
        table.add(
            name,
            format_time(times[name]),
            format_ratio(times[name] / times["outcome path, grpo, (B,)"]),
            format_ratio(times[name] / times["outcome path + one (B,T) write"]),
        )
    table.notes.append("The outcome path never touches (B, T); the step-level path must read the masks and tokens and write (B, T) advantages.")
    report.tables.append(table)
    ratio = times["step-level path, gigpo, (B,T)"] / times["outcome path + one (B,T) write"]
    report.targets.append(Target.check(f"TRL step-level path vs outcome path + (B,T) write at {rows:,} x {length:,}", ratio, 3.0, quick=quick))


def run(quick: bool = False) -> Report:
    report = Report("step_level")
    _core(report, quick)
    for name, part in (("gigpo in TRL", _trl), ("rllm_gigpo in verl", _verl)):  # verl's measures memory with torch's profiler: last
        try:
            part(report, quick)
        except ImportError as error:
            report.targets.append(Target.unavailable(name, f"not available ({error})", "runs"))
    return report


def main() -> None:
    script_main(__doc__, run, "small sizes, one run each (smoke test)")


if __name__ == "__main__":
    main()
