"""Step-level rLLM estimators (``rllm_gigpo``, ``rllm_step_reinforce``, ...) on verl's multi-turn rows.

Each row is one episode; its turns, turn rewards and anchor states follow :mod:`rllm_plugins.steps.turns`
(turns: runs of ``response_mask == 1``; turn rewards: ``token_level_rewards`` up to the next turn;
anchors: the ``responses`` token ids of the environment segment before a turn, the prompt for the
first). Rows are grouped by ``uid``; the outcome of a row is its total reward. Every model token of
turn k gets that turn's advantage, every other token 0. A row without model tokens (``response_mask``
all 0, as the rows verl's v1 ``_balance_batch`` pads a batch with) has no turn: it gets 0 and stays out
of every statistic. ``gamma``: ``algorithm.rllm_estimator_kwargs.gamma``, else ``algorithm.gamma``, else the
``gamma`` verl's ``compute_advantage`` (or the registered function) was called with (:func:`resolve_gamma`). A
value-based estimator (``needs_values``, ``rllm_turn_gae``) reads the critic's ``values`` (B, T) at each turn's first
model token and gives the returns (the critic's targets), spread over the turn's model tokens like the advantages;
its ``lam`` is ``rllm_estimator_kwargs.lam``, else ``algorithm.lam``, else the ``lam`` argument, as verl's ``gae``.

verl passes estimators no ``responses``: on the legacy trainer they are read from the DataProto that
``compute_advantage`` is processing (the ``reward_keys`` extension makes it visible); on the v1 trainer,
from TransferQueue for the keys of the batch ``PPOTrainer._compute_advantage`` is processing (the
``v1_batch`` extension), with ``extra_fields["anchor_states"]`` as the override an agent loop may set.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rllm_plugins.layout import Layout
from rllm_plugins.run import Call, Wording, run_steps
from rllm_plugins.steps import StepBatch
from rllm_plugins.steps.anchors import TokenIds, anchor_ids
from rllm_plugins.steps.diagnostics import turn_metrics
from rllm_plugins.steps.turns import PROMPT_ANCHOR, Turns, coded_states, find_turns, spread_to_tokens, turn_anchor_codes, turn_rewards
from rllm_verl.compute.order import rollout_order
from rllm_verl.compute.shaping import unit_shapers
from rllm_verl.compute.state import VERL_ROLE, verl_estimator_state
from rllm_verl.compute.tokens import check_has_tokens
from rllm_verl.compute.transforms import SCORES_KEY, check_token_part, names_context, unit_transforms
from rllm_verl.context import REWARD_KEYS_ENV, V1_BATCH_ENV, add_turn_metrics, algorithm_value, current_keys, current_tensor, fetch_rows, publish_current

__all__ = ["ANCHOR_STATES_KEY", "VERL_DEFAULTS", "StepSources", "compute_rllm_step_advantage", "given_twice", "resolve_gamma", "step_sources"]

ANCHOR_STATES_KEY = "anchor_states"  # non_tensor_batch[ANCHOR_STATES_KEY]: per row, one anchor state per turn (overrides responses)


@dataclass(frozen=True)
class StepSources:
    """Where a step-level estimator's token ids come from: ``responses`` (B, T), ``anchor_states`` (B,) rows of states
    (overrides ``responses``), ``prompts`` (B rows of prompt ids, for sessions)."""

    responses: torch.Tensor | None = None
    anchor_states: Any = None
    prompts: Any = None


def step_sources(index: np.ndarray, length: int, where: str, responses: Any = None, non_tensor_batch: Any = None, prompts: Any = None) -> StepSources:
    """The token ids and anchor overrides of a batch: those given (the DataProto's), else those of verl's v1 batch in TransferQueue."""
    override = None if non_tensor_batch is None else non_tensor_batch.get(ANCHOR_STATES_KEY)
    if responses is not None or override is not None:
        return StepSources(responses, override, prompts)
    rows = fetch_rows(index, where)
    if rows is None:
        return StepSources(None, None, prompts)
    padded = torch.zeros(len(rows.responses), length, dtype=torch.int64)
    if rows.responses:  # each row's own tokens, right-padded as verl pads response_mask
        stacked = torch.nn.utils.rnn.pad_sequence([torch.as_tensor(ids, dtype=torch.int64) for ids in rows.responses], batch_first=True)
        padded[:, : min(stacked.shape[1], length)] = stacked[:, :length]
    given = [ANCHOR_STATES_KEY in extra for extra in rows.extra_fields]
    if any(given) and not all(given):
        row = given.index(False)
        raise ValueError(
            f"{where}: row {row} (uid {index[row]!r}) has no extra_fields[{ANCHOR_STATES_KEY!r}] while other rows have one; "
            "an agent loop that sets anchor states must set them on every output"
        )
    override = None
    if any(given):
        override = np.empty(len(given), dtype=object)
        override[:] = [extra[ANCHOR_STATES_KEY] for extra in rows.extra_fields]
    return StepSources(padded, override, rows.prompts)


VERL_DEFAULTS = {"gamma": 1.0, "lam": 1.0}
"""verl's own defaults of the ``algorithm`` fields an ``rllm_*`` estimator may also take as an option (its ``ppo_trainer`` config)."""


def given_twice(option: str, options: Mapping[str, Any], config: Any) -> str | None:
    """Why ``option`` is given twice (``algorithm.<option>`` off verl's default, and ``rllm_estimator_kwargs.<option>``, to
    different values), or None. The one rule of a run and of ``verl-check``: the two agree, or one of them is left alone."""
    from_algorithm = None if config is None else config.get(option, None)
    if option not in options or from_algorithm is None or from_algorithm == VERL_DEFAULTS.get(option) or from_algorithm == options[option]:
        return None
    return (
        f"{option} is set twice with different values: algorithm.{option}={from_algorithm!r} and "
        f"algorithm.rllm_estimator_kwargs.{option}={options[option]!r} (the estimator would take algorithm.rllm_estimator_kwargs.{option}); "
        "set it in one place"
    )


def resolve_gamma(options: dict[str, Any], config: Any) -> tuple[Any, str]:
    """The discount and where it came from: ``rllm_estimator_kwargs.gamma``, else ``algorithm.gamma``, else the ``gamma``
    argument verl's ``compute_advantage`` was called with (verl's trainers pass ``algorithm.gamma``), else the estimator's
    default (None)."""
    if "gamma" in options:
        return options["gamma"], "algorithm.rllm_estimator_kwargs.gamma"
    return algorithm_value("gamma", config)


def _anchor_states(where: str, index: np.ndarray, turns: Turns, responses: torch.Tensor | None, override: Any) -> tuple[list[Hashable], np.ndarray | None]:
    """Each turn's anchor state: from ``override`` (one sequence of hashables per row, one per turn), else from ``responses``;
    with the states read from ``responses``, their codes ``(K,)`` (:func:`~rllm_plugins.steps.turns.turn_anchor_codes`), else None."""
    if override is not None:
        states: list[Hashable] = []
        per_row = turns.per_row.tolist()
        for row, row_states in enumerate(override):
            if per_row[row] == 0:  # a row without model tokens (a padding row) has no turn to anchor
                continue
            given = len(row_states) if isinstance(row_states, (list, tuple, np.ndarray)) else None
            if given != per_row[row]:
                raise ValueError(
                    f"{where}: row {row} (uid {index[row]!r}) has {per_row[row]} turns (runs of response_mask == 1) but "
                    f"non_tensor_batch[{ANCHOR_STATES_KEY!r}] gives {given if given is not None else type(row_states).__name__}; "
                    "give one anchor state per turn"
                )
            states.extend(row_states)
        return states, None
    if responses is None:
        raise ValueError(
            f"{where} needs `responses` to form anchor states (the environment tokens before each turn), and the batch has none. "
            f"verl's trainers provide them through two extensions of rllm-plugins: check that {REWARD_KEYS_ENV} (legacy trainer) and "
            f"{V1_BATCH_ENV} (v1 trainer) are not 0 (`rllm-plugins verl-check` reports both); when calling verl's functions yourself, "
            f"put `responses` in data.batch or one anchor state per turn in non_tensor_batch[{ANCHOR_STATES_KEY!r}]"
        )
    if tuple(responses.shape) != (turns.row_offsets.size - 1, turns.length):
        raise ValueError(
            f"{where}: responses has shape {tuple(responses.shape)} but response_mask {(turns.row_offsets.size - 1, turns.length)}; "
            "anchor states are read from the responses at the positions of the mask, so they must match"
        )
    codes, distinct = turn_anchor_codes(_numpy(responses), turns)
    return coded_states(codes, distinct), codes


def _numpy(x: torch.Tensor) -> np.ndarray:
    """On the CPU as numpy; 16-bit floats as float64 (bf16 has no numpy dtype, and turn sums need the width)."""
    x = x.detach().to("cpu")
    return x.double().numpy() if x.dtype in (torch.float16, torch.bfloat16) else x.numpy()


def _row_totals(step_rewards: np.ndarray, turns: Turns, token_level_rewards: torch.Tensor) -> np.ndarray:
    """``(B,)`` total reward of each row: the sum of its turn rewards; a row without turns, the sum of its token rewards."""
    totals = np.zeros(turns.row_offsets.size - 1)
    has = turns.per_row > 0
    if turns.num_turns:
        totals[has] = np.add.reduceat(step_rewards, turns.row_offsets[:-1][has])
    if not has.all():
        totals[~has] = _numpy(token_level_rewards[torch.from_numpy(np.flatnonzero(~has))]).sum(axis=-1, dtype=np.float64)
    return totals


def _prompt_state(prompt: Any) -> tuple[str, TokenIds]:
    """The anchor state of a session output's first turn: ``(PROMPT_ANCHOR, its prompt ids)`` (the tag keeps it apart from an environment segment)."""
    ids = prompt.detach().to("cpu").numpy() if isinstance(prompt, torch.Tensor) else np.asarray(prompt)
    return (PROMPT_ANCHOR, TokenIds.of(ids))


def _turn_scores(transforms: Any, index: np.ndarray, turns: Turns, turn_order: np.ndarray) -> np.ndarray | None:
    """Each turn's task score in episode order (``token_level_scores`` read as the turn rewards are), when a transform names
    ``scores`` and the batch verl is processing has them; else None (never the rewards, which may carry the KL penalty)."""
    if not names_context(transforms, "scores"):
        return None
    scores = current_tensor(index, SCORES_KEY)
    return None if scores is None else turn_rewards(_numpy(scores), turns)[turn_order]


def compute_rllm_step_advantage(
    name: str,
    call: Call,
    where: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    episodes: Layout,
    config: Any,
    dtype: torch.dtype,
    sources: StepSources,
    values: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B, T)`` advantages and returns in ``dtype`` of the step-level estimator ``name`` (``call``; its options checked by the caller).

    The returns are the advantages, except for a value-based estimator, which reads ``values`` (B, T) (the critic's,
    at each turn's first model token) and gives the critic's targets.

    The steps of an episode are the turns of its rows, in ``episodes.rows`` order. ``sources`` gives the
    token ids anchor states are read from, or the anchor states themselves (row b's entry: one hashable
    per turn of row b). With sessions of several outputs, each output's first turn is anchored at its prompt ids.
    """
    mask = _numpy(response_mask)
    turns = find_turns(mask)
    check_has_tokens(where, turns.per_row > 0)
    step_rewards = turn_rewards(_numpy(token_level_rewards), turns)
    if not np.isfinite(step_rewards).all():
        j = int(np.flatnonzero(~np.isfinite(step_rewards))[0])
        row = int(turns.row[j])
        raise ValueError(
            f"{where}: row {row} (uid {index[row]!r}), turn {j - int(turns.row_offsets[row])} has reward {step_rewards[j]}; rewards must be finite"
        )
    row_totals = _row_totals(step_rewards, turns, token_level_rewards)
    needs, options = call.needs, call.options
    if not needs.values:  # a critic's value makes a single turn more than a rescaled outcome
        _warn_if_single_turn(name, where, turns)
    episodes = episodes.keeping_rows(turns.per_row > 0)
    states: list[Hashable] = []
    codes = None  # of the states, when read from responses and left as read
    if needs.anchors:
        states, codes = _anchor_states(where, index, turns, sources.responses, sources.anchor_states)
        if sources.anchor_states is None and _anchor_outputs_at_their_prompts(where, index, turns, episodes, sources, states):
            codes = None
        if options.get("anchor_similarity") is not None:  # greedy clustering: visit the episodes in rollout order
            keys = current_keys(index, where)
            episodes = episodes.reordered(rollout_order(episodes.rows, episodes.row_offsets, episodes.unit_offsets, turns, states, keys, where))

    rows = episodes.rows
    counts = turns.per_row[rows]
    row_steps = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(counts, out=row_steps[1:])
    turn_order = np.repeat(turns.row_offsets[:-1][rows] - row_steps[:-1], counts) + np.arange(turns.num_turns)  # turns in episode order
    anchors, ordered_states = None, None
    if needs.anchors:
        group_of_row = np.empty(index.size, dtype=np.int64)
        episode_sizes = np.diff(episodes.row_offsets)
        group_of_row[rows] = np.repeat(np.repeat(np.arange(episodes.unit_offsets.size - 1), np.diff(episodes.unit_offsets)), episode_sizes)
        in_order = np.array_equal(turn_order, np.arange(turns.num_turns))  # rows grouped by uid already
        ordered_states = states if in_order else [states[j] for j in turn_order.tolist()]

        def place(s: int) -> str:
            j = int(turn_order[s])
            row = int(turns.row[j])
            return f"{where}: row {row} (uid {index[row]!r}), turn {j - int(turns.row_offsets[row])}"

        anchors = anchor_ids(ordered_states, group_of_row[turns.row[turn_order]], place, None if codes is None else codes[turn_order])
    for option in ("gamma", "lam") if needs.values else ("gamma",):
        problem = given_twice(option, options, config)
        if problem is not None:
            raise ValueError(f"{where}: {problem}")
    gamma, _ = resolve_gamma(dict(options), config)
    added: dict[str, Any] = {}  # verl's own settings, for an estimator whose options leave them out
    if gamma is not None and "gamma" not in options:
        added["gamma"] = gamma
    step_tokens = (turns.end - turns.start)[turn_order].astype(np.float64)  # each turn's model tokens (turn_credit's center="tokens")
    per_step: dict[str, np.ndarray] = {"step_tokens": step_tokens}
    if needs.lengths:
        per_step["lengths"] = _episode_lengths(mask, episodes)
    if needs.values:
        lam, _ = algorithm_value("lam", config)  # GAE's lambda: verl's algorithm.lam, else its lam argument
        if "lam" not in options and lam is not None:
            added["lam"] = lam
        per_step["step_values"] = turn_values(where, index, turns, values)[turn_order]
    batch = StepBatch(
        row_totals[episodes.final_rows],
        episodes.unit_offsets,
        step_rewards[turn_order],
        row_steps[episodes.row_offsets],
        anchors,
        ordered_states,
        **per_step,
    )

    def not_finite(grouped: np.ndarray, what: str) -> str:
        per_turn = np.empty_like(grouped)
        per_turn[turn_order] = grouped
        j = int(np.flatnonzero(~np.isfinite(per_turn))[0])
        row = int(turns.row[j])
        return f"{call.who} gave {what} {per_turn[j]} for row {row} (uid {index[row]!r}), turn {j - int(turns.row_offsets[row])}"

    state = verl_estimator_state() if needs.state else None  # a composite's stateful term: this process's state, as for rllm_rae
    transforms = unit_transforms(config)  # the unit part of the transforms, one unit per turn (as the collector's step level)
    if transforms is not None:
        transforms.context = {"lengths": step_tokens, "scores": _turn_scores(transforms, index, turns, turn_order)}
    shapers = unit_shapers(config, index, response_mask, episodes, turns.per_row.astype(np.float64))  # one unit per episode
    grouped, grouped_returns, commit = run_steps(
        call, batch, wording=Wording("steps", not_finite), role=VERL_ROLE, state=state, context=added, transforms=transforms, shapers=shapers
    )
    per_turn = _checked_per_turn(grouped, turn_order, "advantage", where, index, turns, dtype)
    per_turn_returns = per_turn if grouped_returns is None else _checked_per_turn(grouped_returns, turn_order, "return", where, index, turns, dtype)
    check_token_part(config, index)  # before the commit: a run the token part will refuse leaves the state as it was
    commit()  # every check passed
    for stage in (shapers, transforms):
        if stage is not None:
            publish_current(stage.metrics, prefix="rllm/")
    episode_steps = row_steps[episodes.row_offsets]  # turn t of an episode: of a session, across its outputs
    add_turn_metrics(lambda: {f"rllm/{k}": v for k, v in turn_metrics(grouped, step_rewards[turn_order], episode_steps).items()})
    device = token_level_rewards.device
    spread = torch.from_numpy(spread_to_tokens(per_turn, turns, dtype=np.float64 if dtype == torch.float64 else np.float32)).to(device=device, dtype=dtype)
    if per_turn_returns is per_turn:
        return spread, spread
    returns = spread_to_tokens(per_turn_returns, turns, dtype=np.float64 if dtype == torch.float64 else np.float32)
    return spread, torch.from_numpy(returns).to(device=device, dtype=dtype)


def _episode_lengths(mask: np.ndarray, episodes: Layout) -> np.ndarray:
    """``(N,)`` each episode's response tokens (``response_mask`` summed over its rows; a session's over all its outputs)."""
    row_lengths = mask.sum(axis=-1, dtype=np.float64)[episodes.rows]
    episode_of_row = np.repeat(np.arange(episodes.row_offsets.size - 1), np.diff(episodes.row_offsets))
    return np.bincount(episode_of_row, weights=row_lengths, minlength=episodes.row_offsets.size - 1)


def _checked_per_turn(grouped: np.ndarray, turn_order: np.ndarray, what: str, where: str, index: np.ndarray, turns: Turns, dtype: torch.dtype) -> np.ndarray:
    """``grouped`` (K,) in episode order (finite), back in turn order; refuses a value past ``dtype``'s range, naming row and turn."""
    per_turn = np.empty_like(grouped)
    per_turn[turn_order] = grouped
    limit = float(torch.finfo(dtype).max)
    if np.abs(per_turn).max(initial=0.0) > limit:
        j = int(np.flatnonzero(np.abs(per_turn) > limit)[0])
        row = int(turns.row[j])
        raise ValueError(
            f"{where}: {what} {per_turn[j]} of row {row} (uid {index[row]!r}), turn {j - int(turns.row_offsets[row])} "
            f"overflows {dtype} (largest {limit:g}), the dtype of token_level_rewards; compute rewards in a wider dtype, or scale them down"
        )
    return per_turn


def turn_values(where: str, index: np.ndarray, turns: Turns, values: torch.Tensor | None) -> np.ndarray:
    """``(K,)`` the critic's value of each turn: ``values`` (B, T) at the turn's first model token; refuses missing or non-finite values."""
    if values is None:
        raise ValueError(
            f"{where} is value-based: it reads the critic's values (data.batch['values']), and the batch has none. verl computes them "
            f"only with a critic: set critic.enable=true; on verl's trainers the {REWARD_KEYS_ENV} extension must not be 0 "
            "(`rllm-plugins verl-check` reports it); when calling verl's functions yourself, put `values` (B, T) in data.batch"
        )
    if tuple(values.shape) != (turns.row_offsets.size - 1, turns.length):
        raise ValueError(
            f"{where}: values has shape {tuple(values.shape)} but response_mask {(turns.row_offsets.size - 1, turns.length)}; "
            "the critic's values are read at each turn's first model token, so they must match"
        )
    critic = _numpy(values)  # gathered first (a flat index per turn where contiguous): (K,) converted, not (B, T)
    gathered = critic.reshape(-1)[turns.row * turns.length + turns.start] if critic.flags.c_contiguous else critic[turns.row, turns.start]
    per_turn = gathered.astype(np.float64)
    if not np.isfinite(per_turn).all():
        j = int(np.flatnonzero(~np.isfinite(per_turn))[0])
        row = int(turns.row[j])
        turn = j - int(turns.row_offsets[row])
        raise ValueError(f"{where}: row {row} (uid {index[row]!r}), turn {turn} has critic value {per_turn[j]}; values must be finite")
    return per_turn


def _anchor_outputs_at_their_prompts(where: str, index: np.ndarray, turns: Turns, episodes: Layout, sources: StepSources, states: list[Hashable]) -> bool:
    """In a batch of sessions with several outputs, anchor each output's first turn at its own prompt ids (in place); whether it did.

    The row rule gives every row's first turn the task prompt's state; a session's later output starts from
    another prompt (the task prompt and what came before, or a fresh observation), so with sessions every
    output's first turn is anchored at its prompt: outputs that start from equal prompts meet, whichever they are.
    """
    later = episodes.continuing_rows
    if later.size == 0:
        return False
    if sources.prompts is None:
        row = int(later[0])
        raise ValueError(
            f"{where}: row {row} (uid {index[row]!r}) is a later output of its session, whose first turn is anchored at its own prompt, "
            "and the batch has no `prompts`; put them in data.batch['prompts'] or give non_tensor_batch['anchor_states']"
        )
    for row in episodes.rows.tolist():
        states[int(turns.row_offsets[row])] = _prompt_state(sources.prompts[row])
    return True


_warned_single_turn: set[str] = set()


def _warn_if_single_turn(name: str, where: str, turns: Turns) -> None:
    """Warn once per estimator when no row has more than one turn: a step-level estimator then only rescales the outcome one."""
    if name in _warned_single_turn or turns.num_turns == 0 or int(turns.per_row.max()) > 1:
        return
    _warned_single_turn.add(name)
    warnings.warn(
        f"{where}: every row of this batch has at most one turn (one run of response_mask == 1), so this step-level estimator "
        "only rescales an outcome-level one (docs/turn_level.md, 'single-turn rule'). For multi-turn credit, use an agent loop that "
        "returns the tool/environment tokens with response_mask 0 (actor_rollout_ref.rollout.multi_turn.enable=true), or choose an "
        "outcome-level rllm_* estimator",
        UserWarning,
        stacklevel=2,
    )
