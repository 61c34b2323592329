"""Step-level estimators (``gigpo``, ``step_reinforce``, ...) on TRL's multi-turn completions.

A multi-turn episode is one completion whose tokens mix model tokens and tool/environment tokens;
TRL marks the latter with ``tool_mask == 0`` (from its tool loop, or from the ``env_mask`` a
``rollout_func`` returns). Following :mod:`rllm_plugins.steps.turns`:

- a **turn** is a maximal run of ``completion_mask * tool_mask == 1``; without ``tool_mask`` every
  completion is one turn; its length is its number of model tokens (``StepBatch.step_tokens``, a turn's weight where
  an estimator takes statistics over tokens: ``turn_credit(center="tokens")``);
- the **anchor state** of turn 0 is the completion's own prompt ids (shared by a group whose
  completions have one prompt; a ``rollout_func`` may return different ``prompt_ids`` within a group),
  of turn k >= 1 the token ids of the tool/environment segment right before it; a ``rollout_func``
  may override them with the extra key :data:`ANCHOR_STATES_KEY` (one hashable per turn of each completion);
- the **step rewards** are 0 for every turn but the last, whose reward is the completion's reward
  (the weighted sum of the reward functions); a ``rollout_func`` may give them with the extra key
  :data:`TURN_REWARDS_KEY` (one number per turn). The **outcome** is the completion's reward;
- groups are ``num_generations`` contiguous rows of the gathered batch (across processes), as in
  the outcome path; an unscorable row (every reward function returned None) is left out and gets 0.

A row TRL masked entirely (``completion_mask`` all 0: ``mask_truncated_completions`` on a truncated
completion) counts as one turn anchored at its prompt with the row's reward, so its outcome joins its
group's statistics as in the outcome path; its advantage reaches no token and its overrides are ignored.
A row with tokens but no model token (``tool_mask``/``env_mask`` 0 on every completion token) has
nothing to train: it gets advantage 0 and stays out of every statistic, as an unscorable row.

The work is split so that processes agree: :func:`row_turns` describes this process's rows as arrays
(:class:`RowTurns`: turn counts, anchor states coded per step, the overrides; one picklable object), every
process gathers all processes' descriptions and joins them (:meth:`RowTurns.concat`), and
:func:`step_advantages` computes the per-turn advantages of the gathered batch identically everywhere.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from rllm_plugins.advantage import compute_role_metrics
from rllm_plugins.calling import as_finite_real, describe
from rllm_plugins.registry import get_estimator
from rllm_plugins.run import Call, Wording, run_steps
from rllm_plugins.segments import offsets_from_sizes
from rllm_plugins.shaping.stage import Shapers
from rllm_plugins.spec import Estimator
from rllm_plugins.state.store import EstimatorState
from rllm_plugins.steps import StepBatch
from rllm_plugins.steps.anchors import TokenIds, anchor_ids
from rllm_plugins.steps.diagnostics import turn_metrics
from rllm_plugins.steps.turns import PROMPT_ANCHOR, Turns, coded_states, find_turns, spread_to_tokens, turn_anchor_codes
from rllm_plugins.transforms.stage import Transforms
from rllm_trl.outcome import DEFAULT_ROLE, RewardBatch
from rllm_trl.versions import TOOL_PATHS

__all__ = [
    "ANCHOR_STATES_KEY",
    "TURN_REWARDS_KEY",
    "MultiTurnPath",
    "RowTurns",
    "StepAdvantages",
    "compute_step_metrics",
    "local_turns",
    "multi_turn_path",
    "prompt_anchor_codes",
    "role_parts",
    "row_turns",
    "single_turn_warning",
    "spread_local",
    "step_advantages",
    "turn_sources",
    "without_rows",
]

TURN_REWARDS_KEY = "turn_rewards"  # rollout_func extra key: per completion, one reward per turn
ANCHOR_STATES_KEY = "anchor_states"  # rollout_func extra key: per completion, one hashable anchor state per turn
_BLOCK_ENTRIES = 1 << 20  # mask entries per block of rows in local_turns: its bool buffer (1 MiB) stays in cache


@dataclass(frozen=True, eq=False)
class RowTurns:
    """What every process needs to know about rows (its own, or the gathered batch's), as arrays: turn counts, anchor states, overrides.

    ``num_turns`` ``(R,)`` int64 the runs of model tokens of each row (0 for a row TRL masked entirely: ``masked``, and
    for a row without model tokens: ``idle``); ``has_tokens`` ``(R,)`` bool whether ``completion_mask`` has a non-zero entry;
    ``codes`` ``(S,)`` int64 the default anchor state of each step (row ``r`` owns ``num_steps[r]`` of them, in row
    order) as an index into ``states``, equal codes exactly for equal states (None when the estimator reads none);
    ``anchor_overrides`` and ``reward_overrides`` the rollout's :data:`ANCHOR_STATES_KEY` and :data:`TURN_REWARDS_KEY`
    values by row (rows without one are absent); ``step_tokens`` ``(S,)`` int64 the model tokens of each step (0 for a
    masked or idle row's one step; None when not described), the weight of a step where statistics are over tokens.
    """

    num_turns: np.ndarray
    has_tokens: np.ndarray
    codes: np.ndarray | None = None
    states: tuple[Hashable, ...] = ()
    anchor_overrides: Mapping[int, Any] = field(default_factory=dict)
    reward_overrides: Mapping[int, Any] = field(default_factory=dict)
    step_tokens: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.num_turns.size)

    @property
    def masked(self) -> np.ndarray:
        """``(R,)`` bool: TRL masked the whole completion (``completion_mask`` all 0): it counts as one turn without tokens."""
        return (self.num_turns == 0) & ~self.has_tokens

    @property
    def idle(self) -> np.ndarray:
        """``(R,)`` bool: the completion has tokens but none of the model's (``tool_mask`` 0 on all): advantage 0, out of every statistic."""
        return (self.num_turns == 0) & self.has_tokens

    @property
    def num_steps(self) -> np.ndarray:
        """``(R,)`` int64 values each row owns in :class:`StepAdvantages`: one per turn; one for a masked or idle row."""
        return np.maximum(self.num_turns, 1)

    def step_states(self) -> list[Hashable]:
        """``(S,)`` the default anchor state of each step (equal states are one object)."""
        if self.codes is None:
            raise ValueError("these rows were described without anchor states (row_turns(..., with_anchors=False))")
        return coded_states(self.codes, self.states)

    @staticmethod
    def concat(parts: Sequence[RowTurns]) -> RowTurns:
        """The rows of ``parts`` one after the other (each process's, as ``gather_object`` returns them): codes of equal states made equal."""
        if not parts:
            raise ValueError("RowTurns.concat: no rows given")
        if len(parts) == 1:
            return parts[0]
        if len({part.codes is None for part in parts}) != 1:
            raise ValueError("RowTurns.concat: some rows were described with anchor states and some without; give with_anchors the same value on every process")
        codes = None
        index: dict[Hashable, int] = {}
        if parts[0].codes is not None:
            renumbered = []
            for part in parts:
                remap = np.fromiter((index.setdefault(state, len(index)) for state in part.states), dtype=np.int64, count=len(part.states))
                renumbered.append(remap[part.codes])
            codes = np.concatenate(renumbered)
        firsts = np.cumsum([0, *(len(part) for part in parts[:-1])]).tolist()
        tokens = None if any(part.step_tokens is None for part in parts) else np.concatenate([part.step_tokens for part in parts])
        return RowTurns(
            np.concatenate([part.num_turns for part in parts]),
            np.concatenate([part.has_tokens for part in parts]),
            codes,
            tuple(index),
            {first + row: value for first, part in zip(firsts, parts, strict=True) for row, value in part.anchor_overrides.items()},
            {first + row: value for first, part in zip(firsts, parts, strict=True) for row, value in part.reward_overrides.items()},
            tokens,
        )


def local_turns(completion_mask: np.ndarray, tool_mask: np.ndarray | None) -> Turns:
    """The turns of this process's rows ``(B, T)``: runs of ``completion_mask * tool_mask`` non-zero (``completion_mask`` alone without ``tool_mask``).

    Each mask is read once, whatever its dtype: their ``np.logical_and`` is taken in blocks of rows into one bool buffer
    that stays in cache, and the turns of each block found there.
    """
    if tool_mask is None:
        return find_turns(completion_mask)
    completion_mask, tool_mask = np.asarray(completion_mask), np.asarray(tool_mask)
    if completion_mask.ndim != 2 or tool_mask.shape != completion_mask.shape:
        raise ValueError(f"tool_mask has shape {tool_mask.shape}, completion_mask {completion_mask.shape}; both must be (batch, completion_length)")
    rows, length = completion_mask.shape
    block = max(1, _BLOCK_ENTRIES // max(length, 1))
    if rows <= block:
        return find_turns(np.logical_and(completion_mask, tool_mask))
    model = np.empty((block, length), dtype=bool)
    parts = [
        find_turns(np.logical_and(completion_mask[b : b + block], tool_mask[b : b + block], out=model[: min(block, rows - b)])) for b in range(0, rows, block)
    ]
    per_row = np.concatenate([part.per_row for part in parts])
    return Turns(
        np.concatenate([part.row + b for b, part in zip(range(0, rows, block), parts, strict=True)]),
        np.concatenate([part.start for part in parts]),
        np.concatenate([part.end for part in parts]),
        offsets_from_sizes(per_row),
        length,
    )


def prompt_anchor_codes(prompt_ids: np.ndarray, prompt_mask: np.ndarray) -> tuple[np.ndarray, list[Hashable]]:
    """``(B,)`` int64 code of each row's turn-0 anchor state, and the distinct states: ``(PROMPT_ANCHOR, its prompt ids)``
    (:class:`TokenIds`), padding (``prompt_mask`` 0) left out; codes dense from 0 in order of first appearance.

    Equal prompts give equal states on every process (the ids are taken as int64 whatever the padding); the tag keeps a
    prompt apart from an environment segment of the same ids. A state is made for each row whose ids or mask differ from
    the row before (a group's rows share one prompt), then equal states are merged.
    """
    ids = np.asarray(prompt_ids, dtype=np.int64)
    keep = np.asarray(prompt_mask) != 0
    if ids.ndim != 2 or keep.shape != ids.shape:
        raise ValueError(f"prompt_ids {ids.shape} and prompt_mask {keep.shape} must be one 2-D (batch, prompt_length) shape")
    new = np.ones(ids.shape[0], dtype=bool)
    new[1:] = (ids[1:] != ids[:-1]).any(axis=1) | (keep[1:] != keep[:-1]).any(axis=1)
    starts = np.flatnonzero(new)
    kept, width = keep[starts], ids.shape[1]
    first, count = (kept.argmax(axis=1), kept.sum(axis=1)) if width else (np.zeros(starts.size, dtype=np.intp),) * 2
    run = count == width - first - (kept[:, ::-1].argmax(axis=1) if width else 0)  # its kept ids first to last, no hole
    blob, width = ids[starts].tobytes(), width * 8  # a row whose kept ids are one run (left or right padding): its bytes sliced
    index: dict[Hashable, int] = {}
    run_codes = []
    for k, (b, one_run, begin, size) in enumerate(zip(starts.tolist(), run.tolist(), (8 * first).tolist(), (8 * count).tolist(), strict=True)):
        state = TokenIds(blob[k * width + begin : k * width + begin + size]) if one_run else TokenIds.of(ids[b][keep[b]])
        run_codes.append(index.setdefault((PROMPT_ANCHOR, state), len(index)))
    return np.array(run_codes, dtype=np.int64)[np.cumsum(new) - 1], list(index)


def row_turns(
    completion_ids: np.ndarray,
    completion_mask: np.ndarray,
    turns: Turns,
    overrides: Sequence[Mapping[str, Any]] | None,
    *,
    with_anchors: bool,
    prompt_ids: np.ndarray,
    prompt_mask: np.ndarray,
) -> RowTurns:
    """The :class:`RowTurns` of the local rows ``(B, T)`` whose turns are ``turns``; ``overrides[b]`` is row ``b``'s input dict
    (the rollout's extra keys land there).

    ``prompt_ids``/``prompt_mask`` ``(B, P)``, left-padded as in TRL's batch: turn 0 is anchored at each row's own prompt.
    ``completion_mask`` is read only on the rows without a turn (a row with a turn has a token).
    """
    num_turns = turns.per_row
    if overrides is not None and len(overrides) != num_turns.size:
        raise ValueError(f"row_turns: {len(overrides)} input dicts for {num_turns.size} completions; give one per completion")
    has_tokens = num_turns > 0
    empty = np.flatnonzero(~has_tokens)
    if empty.size:
        has_tokens[empty] = (np.asarray(completion_mask)[empty] != 0).any(axis=1)
    codes, states = None, ()
    if with_anchors:
        codes, states = _step_codes(completion_ids, turns, *prompt_anchor_codes(prompt_ids, prompt_mask))
    anchors, rewards = {}, {}
    for b, example in enumerate(overrides or ()):
        if example.get(ANCHOR_STATES_KEY) is not None:
            anchors[b] = example[ANCHOR_STATES_KEY]
        if example.get(TURN_REWARDS_KEY) is not None:
            rewards[b] = example[TURN_REWARDS_KEY]
    return RowTurns(num_turns, has_tokens, codes, states, anchors, rewards, _step_tokens(turns))


def _step_tokens(turns: Turns) -> np.ndarray:
    """``(S,)`` int64 model tokens of each step: a turn's run length; 0 for the one step of a row without turns."""
    num_turns = turns.per_row
    step_offsets = offsets_from_sizes(np.maximum(num_turns, 1))
    tokens = np.zeros(int(step_offsets[-1]), dtype=np.int64)
    tokens[np.arange(turns.num_turns) + (step_offsets[:-1] - turns.row_offsets[:-1])[turns.row]] = turns.end - turns.start
    return tokens


def _step_codes(completion_ids: np.ndarray, turns: Turns, prompt_codes: np.ndarray, prompts: list[Hashable]) -> tuple[np.ndarray, tuple[Hashable, ...]]:
    """``(S,)`` code of each step's default anchor state (turn 0 and a row without turns: its prompt's; turn k: the segment before it), and the states."""
    env_codes, env_states = turn_anchor_codes(completion_ids, turns)
    num_turns = turns.per_row
    step_offsets = offsets_from_sizes(np.maximum(num_turns, 1))
    codes = np.empty(int(step_offsets[-1]), dtype=np.int64)
    codes[np.arange(turns.num_turns) + (step_offsets[:-1] - turns.row_offsets[:-1])[turns.row]] = env_codes  # a row with turns: one step each
    codes[step_offsets[:-1]] = prompt_codes + len(env_states)  # turn 0's PROMPT_ANCHOR -> the row's own prompt
    return codes, (*env_states, *prompts)


def _by_first_appearance(codes: np.ndarray, count: int) -> np.ndarray:
    """``codes`` ``(S,)`` (each in ``range(count)``) renumbered dense from 0 in order of first appearance: one scatter, no sort of ``S``."""
    first = np.full(count, codes.size, dtype=np.int64)
    np.minimum.at(first, codes, np.arange(codes.size))
    present = np.flatnonzero(first < codes.size)
    rank = np.empty(count, dtype=np.int64)
    rank[present[np.argsort(first[present])]] = np.arange(present.size)
    return rank[codes]


def _where(row: int, num_generations: int) -> str:
    return f"completion {row} of the gathered batch (group {row // num_generations})"


def _per_turn(value: Any, n: int, where: str, key: str, noun: str, plural: str) -> list[Any]:
    """A rollout override: a sequence of exactly one value per turn (``n``), else a ValueError naming the completion."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence | np.ndarray):
        raise ValueError(f"{where}: {key} must be a list of one {noun} per turn, got {type(value).__name__} {value!r}")
    values = list(value)
    if len(values) != n:
        raise ValueError(
            f"{where}: {key} has {len(values)} {plural} for {n} turns (runs of model tokens, env_mask/tool_mask == 1, "
            f"in its completion); return one {noun} per model turn"
        )
    return values


def _checked_rewards(value: Any, n: int, where: str) -> list[float]:
    values = _per_turn(value, n, where, TURN_REWARDS_KEY, "reward", "rewards")
    for t, reward in enumerate(values):
        if isinstance(reward, (bool, np.bool_)) or as_finite_real(reward) is None:
            raise ValueError(f"{where}, turn {t}: {TURN_REWARDS_KEY} entry must be a finite number, got {describe(reward)}")
    return [float(r) for r in values]


def _checked_states(value: Any, n: int, where: str) -> list[Hashable]:
    return _per_turn(value, n, where, ANCHOR_STATES_KEY, "anchor state", "states")


@dataclass(frozen=True)
class StepAdvantages:
    """Per-turn advantages of the gathered batch: row ``i`` owns ``values[offsets[i]:offsets[i + 1]]`` (a masked or idle row one value).

    ``step_rewards`` the turns' rewards, ``scored`` ``(N,)`` the rows in the statistics (scorable, with a
    model token or masked by TRL); rows out of them have advantage and step reward 0.
    """

    values: np.ndarray
    offsets: np.ndarray
    anchors: np.ndarray | None  # (turns of scored rows,) anchor-group ids, for metrics
    step_rewards: np.ndarray
    scored: np.ndarray

    def per_row_mean(self) -> np.ndarray:
        """``(N,)`` mean of each row's turn advantages (what the completions table logs)."""
        sizes = np.diff(self.offsets)
        return np.add.reduceat(self.values, self.offsets[:-1]) / sizes if self.values.size else np.zeros(sizes.size)


def step_advantages(
    rows: Sequence[RowTurns],
    rewards: np.ndarray,
    num_generations: int,
    estimator_name: str,
    options: Mapping[str, Any],
    *,
    lengths: np.ndarray | None = None,
    task_ids: np.ndarray | None = None,
    state: EstimatorState | None = None,
    roles: Sequence[str] = (DEFAULT_ROLE,),
    transforms: Transforms | None = None,
    estimator: Estimator | None = None,
    shapers: Shapers | None = None,
) -> StepAdvantages:
    """Run step-level estimator ``estimator_name`` on the gathered rows (``rewards`` ``(N,)`` float64, NaN: unscorable).

    Unscorable rows (NaN reward) and idle rows (tokens but no model token) get 0 and stay out of the
    statistics. Raises ``ValueError`` naming the completion, its group and the turn for an override
    with the wrong number of turns or a bad value, and a non-finite advantage. The estimator gets what it
    needs with ``options`` (:func:`rllm_plugins.needs.needs_of`): anchor states, ``lengths`` ``(N,)`` (the
    completion lengths, as an outcome-level estimator gets them), and its state in ``state`` under the batch's
    one role of ``roles`` (with ``task_ids`` ``(N,)``), updated once the call succeeded. ``transforms``
    (``RLLMGRPOConfig.advantage_transforms``' sequence part) run in the same run on the scorable rows' turns, one part
    per role (:func:`role_parts`); their metrics go into ``transforms.metrics``. ``shapers`` (``RLLMGRPOConfig.reward_shapers``,
    their context one value per row) add each scorable completion's terms to its outcome and its last turn's reward before
    the estimator. ``estimator``: ``estimator_name``
    already resolved (the trainer's, resolved once); looked up by name when None.
    """
    if estimator is None:
        estimator = get_estimator(estimator_name)
    who = f"step-level estimator {estimator_name!r} ({estimator.provider})"
    call = Call(estimator, options, who)
    needs = call.needs
    G = num_generations  # noqa: N806 - the paper's name
    if len(rows) != rewards.size:
        raise ValueError(f"{len(rows)} completions described for {rewards.size} rewards")
    counts = rows.num_steps
    offsets = offsets_from_sizes(counts)
    scorable = ~np.isnan(rewards) & ~rows.idle
    overridable = scorable & (rows.num_turns > 0)  # a masked row's overrides are ignored
    step_rewards = np.zeros(int(offsets[-1]))
    step_rewards[offsets[1:] - 1] = np.where(scorable, rewards, 0.0)
    for i in sorted(rows.reward_overrides):
        if overridable[i]:
            step_rewards[offsets[i] : offsets[i + 1]] = _checked_rewards(rows.reward_overrides[i], int(rows.num_turns[i]), _where(i, G))

    keep = np.repeat(scorable, counts)  # the steps of scorable rows, in row order (rows are already in group order)
    step_offsets = offsets_from_sizes(counts[scorable])
    traj_offsets = np.concatenate([[0], np.cumsum(scorable.reshape(-1, G).sum(axis=1), dtype=np.int64)])
    anchors, states = None, None
    if needs.anchors:
        if rows.codes is None:
            raise ValueError(f"{who} reads anchor states, and the completions were described without them (row_turns(..., with_anchors=False))")
        kept_rows = np.flatnonzero(scorable)

        def where(s: int) -> str:
            j = int(np.searchsorted(step_offsets, s, side="right") - 1)
            return f"{_where(int(kept_rows[j]), G)}, turn {s - int(step_offsets[j])}"

        group_index = np.repeat(np.arange(traj_offsets.size - 1), np.diff(step_offsets[traj_offsets]))
        overridden = [i for i in sorted(rows.anchor_overrides) if overridable[i]]
        if overridden:  # any hashable per turn: coded by anchor_ids, which checks each
            every = rows.step_states()
            for i in overridden:  # one per step: the defaults by construction, an override checked here
                every[offsets[i] : offsets[i + 1]] = _checked_states(rows.anchor_overrides[i], int(rows.num_turns[i]), _where(i, G))
            states = list(itertools.compress(every, keep.tolist()))
            anchors = anchor_ids(states, group_index, where)
        else:  # the default states, coded exactly when the rows were described
            codes = rows.codes[keep]
            states = coded_states(codes, rows.states)
            anchors = anchor_ids(states, group_index, where, codes=_by_first_appearance(codes, len(rows.states)))
    if needs.lengths and lengths is None:
        raise ValueError(f"{who} reads the completion lengths, and none were given")
    # each turn's model tokens: its weight where statistics are over tokens (turn_credit's center="tokens")
    tokens = None if rows.step_tokens is None else rows.step_tokens[keep]
    kept_lengths = lengths[scorable] if needs.lengths else None
    batch = StepBatch(rewards[scorable], traj_offsets, step_rewards[keep], step_offsets, anchors, states, kept_lengths, step_tokens=tokens)
    if needs.state and len(roles) != 1:
        raise ValueError(
            f"{who} keeps a state per role, and this batch holds the roles {list(roles)} in one call of the step-level path: "
            "drop role_column, or the stateful term"
        )

    def not_finite(values: np.ndarray, _: str) -> str:
        per_turn = np.zeros(step_rewards.size)
        per_turn[keep] = values
        s = int(np.flatnonzero(~np.isfinite(per_turn))[0])
        i = int(np.searchsorted(offsets, s, side="right") - 1)
        return f"{who} gave advantage {per_turn[s]} to {_where(i, G)}, turn {s - int(offsets[i])}; advantages must be finite"

    values, _, commit = run_steps(
        call,
        batch,
        wording=Wording("turns", not_finite),
        role=roles[0],
        state=state,
        task_ids=None if task_ids is None else task_ids[scorable],
        transforms=transforms,
        shapers=None if shapers is None else replace(shapers, context={k: None if v is None else np.asarray(v)[scorable] for k, v in shapers.context.items()}),
    )
    per_turn = np.zeros(step_rewards.size)
    per_turn[keep] = values
    step_rewards[~keep] = 0.0
    commit()  # every check passed
    return StepAdvantages(per_turn, offsets, anchors, step_rewards, scorable)


def role_parts(roles: Sequence[str], group_roles: np.ndarray) -> list[tuple[str, np.ndarray, None]]:
    """One part of :class:`~rllm_plugins.transforms.stage.Transforms` per role: its name and its groups (``group_roles`` ``(G,)``)."""
    return [(role, np.asarray(group_roles) == r, None) for r, role in enumerate(roles)]


def spread_local(result: StepAdvantages, rows: RowTurns, first_row: int, turns: Turns) -> np.ndarray:
    """``(B, T)`` float32 advantages of this process's rows (gathered rows ``first_row:first_row + B``, whose turns are ``turns``).

    Turn k's advantage on its model tokens, 0 on tool/environment tokens and padding.
    """
    count = turns.row_offsets.size - 1
    if not np.array_equal(rows.num_turns[first_row : first_row + count], turns.per_row):
        raise ValueError(f"spread_local: the turns of rows {first_row}:{first_row + count} are not those the rows were described with")
    at = np.arange(turns.num_turns) + (result.offsets[first_row : first_row + count] - turns.row_offsets[:-1])[turns.row]  # turn j's value
    return spread_to_tokens(result.values[at], turns, dtype=np.float32)


def without_rows(batch: RewardBatch, out: np.ndarray) -> RewardBatch:
    """``batch`` with the rows ``out`` ``(N,)`` bool made unscorable (NaN rewards), so every statistic leaves them out."""
    if not out.any():
        return batch
    per_func = None
    if batch.rewards_per_func is not None:
        per_func = np.array(batch.rewards_per_func, order="F")
        per_func[out] = np.nan
    return replace(batch, rewards=np.where(out, np.nan, batch.rewards), scorable=batch.scorable & ~out, rewards_per_func=per_func)


def compute_step_metrics(batch: RewardBatch, result: StepAdvantages) -> dict[str, float]:
    """Per-turn metrics of the scored completions (``result.scored``), per role (the core collector's keys for steps):

    ``advantage/{role}/{mean,std,max,min,fraction_zero}`` over turns (one value per turn, not per
    token or completion), ``batch/{role}/turns/mean`` (turns per completion) and, with anchor states,
    ``batch/{role}/anchor_groups/mean_size`` and ``batch/{role}/anchor_groups/fraction_singleton_steps``;
    over all roles, where credit goes by turn index: ``turn/...`` of :func:`rllm_plugins.steps.diagnostics.turn_metrics`
    (``turn/{t}/advantage_mean`` and ``turn/{t}/reward_mean``, the turn's step reward, for ``t < 3``; ``turn/last/...``;
    ``turn/count_mean``), the keys the collector gives per role and verl's v1 trainer logs as ``rllm/turn/...``.
    """
    counts = np.diff(result.offsets)
    row_roles = np.repeat(batch.group_roles, batch.num_generations)
    turn_roles = np.repeat(row_roles, counts)
    turn_scored = np.repeat(result.scored, counts)
    metrics = compute_role_metrics(
        {name: result.values[turn_scored & (turn_roles == r)] for r, name in enumerate(batch.roles)}, "advantage", with_fraction_zero=True
    )
    for r, name in enumerate(batch.roles):
        in_role = result.scored & (row_roles == r)
        if in_role.any():
            metrics[f"batch/{name}/turns/mean"] = float(counts[in_role].mean())
    if result.anchors is not None and result.anchors.size:
        sizes = np.bincount(result.anchors)
        anchor_roles = turn_roles[turn_scored]
        for r, name in enumerate(batch.roles):
            ids = result.anchors[anchor_roles == r]
            if ids.size:
                metrics[f"batch/{name}/anchor_groups/mean_size"] = float(ids.size / np.unique(ids).size)
                metrics[f"batch/{name}/anchor_groups/fraction_singleton_steps"] = float(np.mean(sizes[ids] == 1))
    scored_offsets = offsets_from_sizes(counts[result.scored])
    metrics.update(turn_metrics(result.values[turn_scored], result.step_rewards[turn_scored], scored_offsets))
    return metrics


# ---------------------------------------------------------------- where the turns came from, for the log
#
# Where a step-level estimator's turns, step rewards and anchor states come from, in words, for the trainer's log.
#
# The trainer says it once, at the first step: which of TRL's multi-turn paths marks the environment's
# tokens (``tool_mask``), and for each turn whether its step reward and anchor state are the
# ``rollout_func``'s own (``turn_rewards``, ``anchor_states``) or the defaults above.
# Without ``tool_mask`` the warning says what the run has instead, and what a step-level estimator
# then computes.


@dataclass(frozen=True)
class MultiTurnPath:
    """What a trainer has that can mark environment tokens: ``tools`` (TRL's tool loop), an ``environment_factory``, a ``rollout_func``."""

    tools: bool
    environment_factory: bool
    rollout_func: bool

    def tool_mask_source(self) -> str:
        """Who wrote the ``tool_mask`` of a batch that has one."""
        if self.rollout_func and not self.tools:
            return "the rollout_func's env_mask"
        if self.environment_factory:
            return "TRL's tool loop (the environment_factory's tools)"
        return "TRL's tool loop (tools=...)"

    def missing(self) -> tuple[str, str]:
        """Why a batch has no ``tool_mask``, and how to give it one."""
        if self.rollout_func:
            return "the rollout_func returns no env_mask", "return env_mask from it: 1 on the model's tokens, 0 on the environment's"
        if self.environment_factory:
            return (
                "the environment_factory's environments have no tools (no public method besides reset and get_reward), so TRL runs no tool loop",
                "give the environment a public method the model calls as a tool",
            )
        return "the trainer has no tools, environment_factory or rollout_func", (
            "train through TRL's tool loop (tools=[...]), an environment_factory with tools, or a rollout_func that returns env_mask"
        )


def multi_turn_path(trainer: Any) -> MultiTurnPath:
    """The multi-turn path of a built ``GRPOTrainer``, read from the attributes TRL leaves (:data:`rllm_trl.versions.TOOL_PATHS`)."""
    found = {path.argument: getattr(trainer, path.attribute, None) for path in TOOL_PATHS}
    return MultiTurnPath(
        tools=bool(found["tools"]),
        environment_factory=found["environment_factory"] is not None,
        rollout_func=found["rollout_func"] is not None,
    )


def single_turn_warning(estimator: str, path: MultiTurnPath) -> str:
    """The warning for a step-level ``estimator`` on completions without ``tool_mask``: what the run has, what it computes, the fix."""
    why, fix = path.missing()
    return (
        f"adv_estimator={estimator!r} is step-level, but the completions carry no tool_mask: {why}. Each completion is one turn "
        f"anchored at its prompt and rewarded with its outcome, so {estimator!r} gives one advantage per completion that only rescales "
        "an outcome-level estimator (docs/trl.md, single-turn rule: gigpo = (1 + step_advantage_w) x grpo on groups of two or more "
        f"scorable completions, step_reinforce = grpo). For per-turn credit, {fix}; for single-turn training select 'grpo'"
    )


def turn_sources(estimator: str, rows: RowTurns, path: MultiTurnPath, *, has_tool_mask: bool, needs_anchors: bool) -> str:
    """One line: where the turns, each turn's step reward and (with ``needs_anchors``) anchor state of the gathered ``rows`` came from."""
    active = rows.num_turns > 0
    count = int(active.sum())
    turns = f"turns from {path.tool_mask_source()}" if has_tool_mask else "one turn per completion (no tool_mask)"
    given = sum(bool(active[row]) for row in rows.reward_overrides)
    rewards = "the completion's reward on its last turn, 0 before"
    if given:
        rewards = f"the rollout_func's {TURN_REWARDS_KEY} on {given} of {count} completions" + (f", else {rewards}" if given < count else "")
    parts = [f"adv_estimator={estimator!r}: {turns}", f"step rewards: {rewards}"]
    if needs_anchors:
        given = sum(bool(active[row]) for row in rows.anchor_overrides)
        anchors = "turn 0 the completion's prompt ids, turn k the environment tokens right before it"
        if given:
            anchors = f"the rollout_func's {ANCHOR_STATES_KEY} on {given} of {count} completions" + (f", else {anchors}" if given < count else "")
        parts.append(f"anchor states: {anchors}")
    return "; ".join(parts)
