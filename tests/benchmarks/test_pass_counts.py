"""The common advantage paths pass over (B, T) tensors only as often as the work needs: counted, not timed.

torch side: every aten operation of a call is recorded by a ``TorchDispatchMode`` (views excluded): the elements it
reads from and writes to each storage, and each new storage of B * T elements or more. Divided by B * T, that is
the number of passes over the token rewards, the mask and the output. An outcome estimator in verl needs one read
of the rewards (their row sums), one read of the mask and the output (``advantage[:, None] * mask``), which is
written in blocks of rows that stay in cache (the mask block cast into it, then scaled in place: one pass to
memory, counted here as two writes and one read); an estimator that takes ``lengths`` reads the mask once more.
numpy side: ``tracemalloc`` peaks (numpy reports its buffers to it) are held to what the output and per-row
vectors need, so a (B, T) numpy temporary fails as well.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

from benchmarks.step_level import peak_bytes as numpy_peak  # noqa: E402  (tracemalloc's peak during one call)

B, T, N_PER_UID = 64, 4099, 8

FACTORIES = (torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default)  # allocate, write nothing
GATHERS = (torch.ops.aten.index_select.default, torch.ops.aten.index.Tensor)  # read only the rows they return


def _storage(t: Any) -> int:
    return t.untyped_storage().data_ptr()


class Passes(TorchDispatchMode):
    """Elements read from and written to each storage during a call, and the operations that made a storage of ``numel`` elements or more."""

    def __init__(self, numel: int) -> None:
        super().__init__()
        self.numel = numel
        self.read: Counter[int] = Counter()
        self.written: Counter[int] = Counter()
        self.allocations: list[str] = []
        self.kept: list[Any] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func.is_view:
            return out
        inputs = [t for t in tree_leaves((args, kwargs or {})) if isinstance(t, torch.Tensor)]
        outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        in_place = func._schema.name.endswith("_") and func is not torch.ops.aten.copy_.default  # mul_ reads what it overwrites
        if func in GATHERS:
            self.read[_storage(inputs[0])] += sum(o.numel() for o in outputs)
        else:
            for t in inputs:
                if in_place or not any(t is o for o in outputs):
                    self.read[_storage(t)] += t.numel()
        self.kept.extend(outputs)  # alive until the end: no later tensor reuses a storage address
        sources = {_storage(t) for t in inputs}
        for o in outputs:
            if func not in FACTORIES:
                self.written[_storage(o)] += o.numel()
            if o.untyped_storage().nbytes() // o.element_size() >= self.numel and _storage(o) not in sources:
                self.allocations.append(str(func))
        return out

    def passes(self, **tensors: Any) -> dict[str, Any]:
        """``{"<name> read": passes, "<name> written": passes, ..., "allocations": [op, ...]}`` for each named (B, T) tensor."""
        out: dict[str, Any] = {}
        for name, t in tensors.items():
            out[f"{name} read"] = round(self.read[_storage(t)] / self.numel, 3)
            out[f"{name} written"] = round(self.written[_storage(t)] / self.numel, 3)
        out["allocations"] = self.allocations
        return out


def outcome_passes(data: Any, call: Callable[[], object]) -> dict[str, Any]:
    """The passes of ``call()`` over ``data``'s token rewards and mask and the advantages it leaves in ``data``."""
    rewards, mask = data.batch["token_level_rewards"], data.batch["response_mask"]
    with torch.no_grad(), Passes(B * T) as mode:
        call()
    return mode.passes(rewards=rewards, mask=mask, output=data.batch["advantages"])


def _dataproto(padding_rows: int = 0, mask_dtype: Any = None) -> Any:
    """B rows, N_PER_UID per uid, each row's reward on its last token; the last ``padding_rows`` (one uid) are verl v1's padding (mask all 0)."""
    from verl import DataProto

    rng = np.random.default_rng(0)
    lengths = torch.from_numpy(rng.integers(1, T + 1, size=B))
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).to(mask_dtype or torch.int64)
    if padding_rows:
        mask[B - padding_rows :] = 0
    rewards = torch.zeros(B, T, dtype=torch.float32)
    rewards[torch.arange(B), lengths - 1] = torch.from_numpy(rng.integers(0, 2, size=B).astype(np.float32))
    uid = np.repeat(np.array([f"prompt-{i}" for i in range(B // N_PER_UID)], dtype=object), N_PER_UID)
    if padding_rows:
        uid[B - padding_rows :] = "pad-0"
    return DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors={"uid": uid})


def _config(name: str) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.create({"adv_estimator": f"rllm_{name}", "norm_adv_by_std_in_grpo": True, "gamma": 1.0, "lam": 1.0})


def _outcome_estimators() -> list[str]:
    from rllm_plugins.estimators.builtin import rllm_adv_estimators

    return sorted(spec.name for spec in rllm_adv_estimators() if spec.level == "outcome")


def _expected(name: str, padding_rows: int = 0) -> dict[str, Any]:
    """What the work needs: the rewards' row sums, the mask once (and the rows of a padding group, and once more for
    ``lengths``), the output written blockwise (cast, then scaled in place); on the CPU it is allocated by numpy
    (``empty_output``: huge pages), so torch allocates nothing of (B, T) (its numpy side: the test below)."""
    from rllm_plugins.needs import needs_of
    from rllm_plugins.registry import get_estimator

    mask = 1 + needs_of(get_estimator(name).spec, {}).lengths + padding_rows / B
    return {
        "rewards read": 1.0,
        "rewards written": 0.0,
        "mask read": round(mask, 3),
        "mask written": 0.0,
        "output read": 1.0,
        "output written": 2.0,
        "allocations": [],
    }


def _fresh_state() -> None:
    from rllm_verl.compute.state import verl_estimator_state

    verl_estimator_state().clear()


@pytest.fixture(scope="module")
def verl_ready() -> None:
    from rllm_verl.registration import register_estimators_into_verl

    register_estimators_into_verl()


@pytest.mark.parametrize("name", _outcome_estimators())
@pytest.mark.parametrize("padding_rows", [0, N_PER_UID], ids=["no padding", "a padding group"])
def test_legacy_compute_advantage_reads_rewards_once_the_mask_once_and_writes_once(verl_ready: None, name: str, padding_rows: int) -> None:
    from verl.trainer.ppo.ray_trainer import compute_advantage

    data = _dataproto(padding_rows)
    _fresh_state()
    passes = outcome_passes(data, lambda: compute_advantage(data, adv_estimator=f"rllm_{name}", config=_config(name)))
    assert passes == _expected(name, padding_rows), f"rllm_{name}"


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float32, torch.int64])
def test_every_mask_dtype_is_read_once(verl_ready: None, mask_dtype: Any) -> None:
    from verl.trainer.ppo.ray_trainer import compute_advantage

    data = _dataproto(mask_dtype=mask_dtype)
    passes = outcome_passes(data, lambda: compute_advantage(data, adv_estimator="rllm_grpo", config=_config("grpo")))
    assert passes == _expected("grpo")


def test_v1_one_output_per_session_reads_rewards_once_the_mask_once_and_writes_once(verl_ready: None) -> None:
    pytest.importorskip("transfer_queue")
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    data = _dataproto()
    keys = [f"{uid}_{row}_0" for row, uid in enumerate(data.non_tensor_batch["uid"].tolist())]
    passes = outcome_passes(data, lambda: compute_advantage_for_multi_trajectories(data, keys, adv_estimator="rllm_grpo", config=_config("grpo")))
    assert passes == _expected("grpo")


def test_the_outcome_path_allocates_its_output_in_numpy_and_nothing_else_of_b_by_t(verl_ready: None) -> None:
    from verl.trainer.ppo.ray_trainer import compute_advantage

    data = _dataproto(N_PER_UID)
    output = data.batch["token_level_rewards"].numel() * 4  # float32 (B, T)
    compute_advantage(data, adv_estimator="rllm_grpo", config=_config("grpo"))  # imports and caches outside the measurement
    peak = numpy_peak(lambda: compute_advantage(data, adv_estimator="rllm_grpo", config=_config("grpo")))
    assert output <= peak < output + B * T // 4, f"tracemalloc peak {peak} bytes: the output is {output}, a (B, T) bool {B * T}"


def test_trl_outcome_step_reads_the_reward_table_a_fixed_number_of_times_and_allocates_per_row_vectors_only() -> None:
    """TRL's outcome step never sees a (B, T) tensor: its input is the gathered (N, F) reward table, its output (N,)."""
    from rllm_trl.outcome import compute_advantages, prepare_batch

    n, f = 4096, 3
    rng = np.random.default_rng(0)
    rewards_per_func = torch.from_numpy(rng.integers(0, 2, size=(n, f)).astype(np.float32))
    weights = torch.ones(f)

    def step() -> object:
        batch = prepare_batch(rewards_per_func, weights, 8)
        return torch.as_tensor(compute_advantages(batch, "grpo"), dtype=torch.float32)

    with Passes(n * f) as mode:
        step()
    passes = mode.passes(table=rewards_per_func)
    # torch: TRL's weighted product in float32 (its numbers exactly); numpy: the float64 copy and the all-None test on it
    assert passes == {"table read": 1.0, "table written": 0.0, "allocations": ["aten.mul.Tensor"]}
    step()
    peak = numpy_peak(step)
    table, per_row = n * f * 8, n * 8
    assert peak <= table + 12 * per_row, f"tracemalloc peak {peak} bytes; the (N, F) float64 table is {table}, a (N,) vector {per_row}"


def _multi_turn_dataproto() -> Any:
    """B rows of 3 turns: model tokens 0-99, 150-299 and 400 up to the row's length, environment tokens between; a reward at each turn's end."""
    from verl import DataProto

    data = _dataproto()
    mask = data.batch["response_mask"]
    rewards = torch.zeros(B, T, dtype=torch.float32)
    lengths = torch.randint(401, T + 1, (B,), generator=torch.Generator().manual_seed(0))
    mask.zero_()
    for row, end in enumerate(lengths.tolist()):
        for start, stop in ((0, 100), (150, 300), (400, end)):
            mask[row, start:stop] = 1
            rewards[row, stop - 1] = float((row + stop) % 2)
    responses = torch.randint(0, 1000, (B, T), generator=torch.Generator().manual_seed(1))
    return DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask, "responses": responses}, non_tensors={"uid": data.non_tensor_batch["uid"]}
    )


@pytest.mark.parametrize("name", ["gigpo", "turn_grpo", "step_reinforce"])
def test_step_level_path_allocates_the_output_and_per_turn_values_only(verl_ready: None, name: str) -> None:
    """Step level: torch passes nothing over (B, T); numpy's peak is the (B, T) float32 output, the environment segments
    coded as anchor states (their int64 ids, twice: the segments of one length, and one bytes object per distinct one)
    and per-row vectors (each part alone: :func:`test_step_level_parts_hold_no_numpy_temporary_of_b_by_t`)."""
    from verl.trainer.ppo.ray_trainer import compute_advantage

    data = _multi_turn_dataproto()
    config = _config(name)
    compute_advantage(data, adv_estimator=f"rllm_{name}", config=config)
    with Passes(B * T) as mode:
        compute_advantage(data, adv_estimator=f"rllm_{name}", config=config)
    # torch: the mask, rewards and responses are read as numpy views, the output is handed over without a copy
    tensors = {key: data.batch[key] for key in ("token_level_rewards", "response_mask", "responses", "advantages")}
    passes = mode.passes(**tensors)
    assert passes == {**dict.fromkeys(passes, 0.0), "allocations": []}, passes
    peak = numpy_peak(lambda: compute_advantage(data, adv_estimator=f"rllm_{name}", config=config))
    output, segments = B * T * 4, B * (150 - 100 + 400 - 300) * 8  # the two environment segments of each row, as int64 ids
    assert peak <= output + 2 * segments + 64 * B * 8, f"tracemalloc peak {peak} bytes; output {output}, environment segments {segments}"


PART_ROWS = 512  # rows for the parts alone: a block of rows of find_turns is a small part of the batch


@pytest.mark.parametrize("tokens_dtype", [np.int64, np.int32])
def test_step_level_parts_hold_no_numpy_temporary_of_b_by_t(tokens_dtype: Any) -> None:
    """The numpy parts of the step level, each alone (``tracemalloc`` peaks; B = 512 rows of 3 turns, T = 4099):

    - ``find_turns`` compares the int64 mask's entries as they are, in blocks: one bool block (``_BLOCK_ENTRIES``
      entries) and per-turn vectors, no (B, T) temporary, not even of bools;
    - ``turn_anchor_codes`` copies the environment segments before turns 1 and 2 (50 and 100 tokens of each row) as
      int64, those of one length at a time, and makes one bytes object per distinct segment: no copy of the tokens
      (B, T), whatever their dtype;
    - ``spread_to_tokens`` allocates its (B, T) float32 output and per-turn vectors only;
    - ``turn_rewards`` reads the float32 rewards in place: per-turn vectors only.
    """
    from rllm_plugins.steps.turns import _BLOCK_ENTRIES, find_turns, spread_to_tokens, turn_anchor_codes, turn_rewards

    rows = PART_ROWS
    rng = np.random.default_rng(0)
    mask = np.zeros((rows, T), dtype=np.int64)
    for row, end in enumerate(rng.integers(401, T + 1, size=rows).tolist()):
        for start, stop in ((0, 100), (150, 300), (400, end)):
            mask[row, start:stop] = 1
    tokens = rng.integers(0, 1000, (rows, T)).astype(tokens_dtype)
    rewards = rng.normal(size=(rows, T)).astype(np.float32)
    turns = find_turns(mask)
    count = turns.num_turns
    per_turn = np.ones(count)
    segments = rows * (50 + 100) * 8
    parts = {
        "find_turns": (lambda: find_turns(mask), _BLOCK_ENTRIES + 64 * count),
        "turn_anchor_codes": (lambda: turn_anchor_codes(tokens, turns), 2 * segments + 128 * count),
        "spread_to_tokens": (lambda: spread_to_tokens(per_turn, turns), rows * T * 4 + 64 * count),
        "turn_rewards": (lambda: turn_rewards(rewards, turns), 64 * count),
    }
    for name, (part, bound) in parts.items():
        part()  # caches outside the measurement
        peak = numpy_peak(part)
        assert peak <= bound, f"{name}: tracemalloc peak {peak} bytes, bound {bound} (B * T = {rows * T}, {count} turns)"
    assert _BLOCK_ENTRIES + 64 * count < rows * T, "the bound of find_turns must be below a (B, T) bool"
