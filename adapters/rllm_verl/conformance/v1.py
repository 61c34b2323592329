"""verl's v1 path of the conformance matrix: ``PPOTrainer._compute_advantage`` with a real TransferQueue on a local Ray.

Rows are stored as verl's v1 agent loop stores them (``AgentLoopOutput.as_dict()`` per output, keys
``{uid}_{session}_{index}``), the trainer is verl's ``PPOTrainerSync`` with verl's composed Hydra config, and
the advantages are read back from TransferQueue. Each trajectory is a session. An outcome-level sample gives
every other session of more than one token two outputs: its model tokens split between them (so the session's
length is the trajectory's), both with the trajectory's reward (v1 copies the final score to every output), the
advantage read from the final output. A step-level sample gives each session one output whose turns are the
steps, each step's reward on its last token of ``rm_scores`` (as a per-turn reward manager leaves them). Rows
are put in a shuffled order; with padding, verl's own ``_balance_batch`` pads the batch (rows with
``response_mask`` all 0, uid ``pad…``) and reorders it. For a value-based estimator (``turn_gae``, with
``critic.enable=true``) the critic's ``values`` are then put as verl's ``_compute_values`` leaves them (nested, one
per response token: each step's value on its model tokens, 0 elsewhere and on padding rows), and the ``returns``
are read back with the advantages. A call's advantage transforms are selected as ``algorithm.rllm_advantage_transforms``
(the twin ``verl_v1+transforms``).

The first call starts Ray (3 CPUs) and TransferQueue in this process, kept for later calls; :func:`close` (also run at
exit) stops what it started. TransferQueue warns on every put and get when torch has fewer cores than it asks for
(``target_num_threads 8 should not exceed ...``), through its own handler and again through the root logger's:
:func:`log_repeats_once` lets each such message through once.
"""

from __future__ import annotations

import atexit
import copy
import itertools
import logging
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from rllm_plugins.testing.matrix import Call, Output, Path, Sample
from rllm_plugins.testing.matrix.paths import PROMPT
from rllm_plugins.testing.matrix.samples import MODEL_TOKEN
from rllm_verl.conformance.legacy import FLOAT32_MAX, critic_values, transform_entries, verl_check_options

__all__ = ["OncePerMessage", "close", "log_repeats_once", "paths", "put_agent_loop_rows", "v1_compute"]

EOS = 2
_started: dict[str, Any] = {}
_calls = itertools.count()
REPEATING_LOGGERS = ("transfer_queue.utils.common",)  # TransferQueue's loggers that warn on every put and get


class OncePerMessage(logging.Filter):
    """Lets the first record of each (logger, level, message) through and drops its repeats."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, int, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, record.getMessage())
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


def log_repeats_once(names: tuple[str, ...] = REPEATING_LOGGERS) -> None:
    """Each message of the loggers ``names`` printed once: a :class:`OncePerMessage` filter, and no second copy
    through the root logger's handlers when the logger has a handler of its own."""
    for name in names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, OncePerMessage) for f in logger.filters):
            logger.addFilter(OncePerMessage())
        if logger.handlers:
            logger.propagate = False


def _transfer_queue() -> Any:
    """TransferQueue on a local Ray, started on first use (Ray only when no Ray runs in this process yet)."""
    import ray
    import transfer_queue as tq

    if "tq" not in _started:
        log_repeats_once()
        atexit.register(close)
        if not ray.is_initialized():
            ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
            _started["ray"] = ray
        tq.init()
        _started["tq"] = tq
    return _started["tq"]


def close() -> None:
    """Stop TransferQueue and the Ray this module started (a no-op when it started none)."""
    tq = _started.pop("tq", None)
    if tq is not None:
        tq.close()
    ray = _started.pop("ray", None)
    if ray is not None:
        ray.shutdown()


def _base_config() -> Any:
    if "config" not in _started:
        from rllm_verl.tools.check import _compose

        _started["config"] = _compose(["actor_rollout_ref.rollout.n=4"], "ppo_trainer", None)
    return _started["config"]


def _trainer(call: Call, adv_estimator: str, critic: bool) -> Any:
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    trainer = PPOTrainerSync.__new__(PPOTrainerSync)
    config = copy.deepcopy(_base_config())
    OmegaConf.update(config, "algorithm.adv_estimator", adv_estimator)
    OmegaConf.update(config, "algorithm.gamma", 1.0)
    OmegaConf.update(config, "algorithm.lam", 1.0)
    OmegaConf.update(config, "critic.enable", critic)  # verl runs a critic for value-based estimators only
    OmegaConf.update(config, "algorithm.rllm_estimator_kwargs", dict(call.options), force_add=True)
    if call.transforms:  # +algorithm.rllm_advantage_transforms='[{name: clip, ...}]'
        OmegaConf.update(config, "algorithm.rllm_advantage_transforms", transform_entries(call), force_add=True)
    trainer.config = config
    return trainer


def _outputs(sample: Sample, prefix: str) -> tuple[list[dict[str, Any]], list[tuple[str, list[int]]]]:
    """The rows (one per output) and, per sample step, (key of the output holding it, position of its first model token)."""
    rows: list[dict[str, Any]] = []
    steps: list[tuple[str, list[int]]] = []
    session = 0
    for g, group in enumerate(sample.groups):
        uid = f"{prefix}task{g:04d}"  # sorted as the groups are (the scan order of a running baseline, rollout_order.scan_order)
        for i, traj in enumerate(group):
            response, mask, scores, firsts = [], [], [], []
            for k, (length, anchor, reward) in enumerate(zip(traj.lengths, traj.anchors, traj.step_rewards, strict=True)):
                response += list(anchor)
                mask += [0] * len(anchor)
                firsts.append(len(response))
                response += [MODEL_TOKEN + k] * length
                mask += [1] * length
                scores += [0.0] * (len(anchor) + length - 1) + [reward]
            if sample.level == "outcome" and i % 2 and len(response) > 1:  # two outputs sharing the model tokens
                half = len(response) // 2
                parts = [(response[:half], mask[:half]), (response[half:], mask[half:])]
                firsts = [0]
            else:
                parts = [(response, mask)]
            for index, (tokens, tokens_mask) in enumerate(parts):
                key = f"{uid}_{session}_{index}"
                row = {"key": key, "uid": uid, "prompt": list(PROMPT), "response": tokens, "mask": tokens_mask, "reward": traj.reward}
                if sample.level == "step":  # per-turn rewards at each turn's last token, as a per-turn reward manager leaves them
                    row["scores"] = scores
                    row["values"] = critic_values(traj)
                rows.append(row)
            steps += [(f"{uid}_{session}_{len(parts) - 1}", [t]) for t in firsts]
            session += 1
    return rows, steps


def _store(rows: list[dict[str, Any]], partition: str, pad: int, order: np.ndarray) -> Any:
    """Put ``rows`` (in ``order``) into this module's TransferQueue; with ``pad``, verl's ``_balance_batch`` pads and reorders."""
    return put_agent_loop_rows(_transfer_queue(), [rows[i] for i in order], partition, pad, _base_config())


def put_agent_loop_rows(tq: Any, rows: list[dict[str, Any]], partition: str, pad: int, config: Any) -> Any:
    """Put ``rows`` into TransferQueue ``tq`` as verl's v1 agent loop does; verl's ``KVBatchMeta`` of them.

    A row: ``key`` (``{uid}_{session}_{index}``), ``uid``, ``prompt``, ``response``, ``mask`` (1 on model tokens),
    ``reward``; optional ``scores`` (token-level ``rm_scores``) and ``extra`` (the output's ``extra_fields``).
    With ``pad`` > 0, verl's own ``PPOTrainer._balance_batch`` (on ``config``, verl's composed trainer config) pads
    the batch with ``pad`` rows (the data-parallel size set to the row count plus ``pad``) and reorders it.
    """
    from transfer_queue import KVBatchMeta
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    fields, tags = [], []
    for row in rows:
        turns = sum(1 for t, m in enumerate(row["mask"]) if m and (t == 0 or not row["mask"][t - 1]))
        output = AgentLoopOutput(
            prompt_ids=row["prompt"],
            response_ids=row["response"],
            response_mask=row["mask"],
            response_logprobs=[0.0] * len(row["response"]),
            reward_score=row["reward"],
            num_turns=2 * turns,
            metrics=AgentLoopMetrics(),
            extra_fields=dict(row.get("extra", {})),
        )
        field = output.as_dict()
        field.update(uid=row["uid"], session_id=int(row["key"].rsplit("_", 2)[1]))
        field["loss_mask"] = field["response_mask"]
        field["old_log_probs"] = torch.zeros(len(row["response"]))  # as PPOTrainer._compute_old_log_prob leaves it
        if "scores" in row:
            field["rm_scores"] = torch.tensor(row["scores"], dtype=torch.float32)
        fields.append(field)
        length = len(row["prompt"]) + len(row["response"])
        tags.append({"status": "success", "prompt_len": len(row["prompt"]), "response_len": len(row["response"]), "seq_len": length})
    keys = [row["key"] for row in rows]
    tq.kv_batch_put(keys=keys, partition_id=partition, fields=list_of_dict_to_tensordict(fields), tags=tags)
    batch = KVBatchMeta(keys=keys, tags=tags, partition_id=partition)
    if not pad:
        return batch
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    balancer = PPOTrainerSync.__new__(PPOTrainerSync)
    balancer.config = config
    balancer.actor_rollout_wg = SimpleNamespace(_dispatch_info={"actor": list(range(len(rows) + pad))})  # data-parallel ranks
    balancer.use_critic, balancer.global_steps = False, -1  # before critic warm-up: no mini-batch multiple, the ranks alone
    balancer.tokenizer = SimpleNamespace(eos_token_id=EOS)
    return balancer._balance_batch(batch, metrics={})


def _put_values(rows: list[dict[str, Any]], batch: Any) -> None:
    """The critic's ``values`` of every key of ``batch`` as verl's ``_compute_values`` puts them (padding rows: 0)."""
    from tensordict import TensorDict

    by_key = {row["key"]: row["values"] for row in rows}
    values = [torch.tensor(by_key.get(key, [0.0] * tag["response_len"]), dtype=torch.float32) for key, tag in zip(batch.keys, batch.tags, strict=True)]
    nested = torch.nested.as_nested_tensor(values, layout=torch.jagged)
    _transfer_queue().kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=TensorDict({"values": nested}, batch_size=len(batch.keys)))


def v1_compute(
    sample: Sample, call: Call, adv_estimator: str, pad: int = 0, critic: bool = False, fields: tuple[str, ...] = ("advantages",)
) -> tuple[dict[str, dict[str, np.ndarray]], list[tuple[str, list[int]]], dict[str, list[int]]]:
    """verl's v1 ``PPOTrainer._compute_advantage`` on the sample's rows (:func:`_outputs`, shuffled, ``pad`` padding rows) in
    TransferQueue; ``adv_estimator`` any name verl knows, verl's own too, ``call`` its options and transforms, ``critic``: the
    critic's values put first. ``(fields by key, each step's (key, first model token), each real row's response mask by key)``."""
    n = next(_calls)
    rows, steps = _outputs(sample, f"c{n}")
    partition = f"conformance_{n}"
    batch = _store(rows, partition, pad, np.random.default_rng(n).permutation(len(rows)))
    tq = _transfer_queue()
    try:
        if critic:
            _put_values(rows, batch)
        out = _trainer(call, adv_estimator, critic)._compute_advantage(batch, metrics={})
        got = tq.kv_batch_get(keys=out.keys, partition_id=out.partition_id, select_fields=list(fields))
        by_key = {f: {key: v.to(torch.float64).numpy() for key, v in zip(out.keys, got[f].unbind(0), strict=True)} for f in fields}
    finally:
        tq.kv_clear(keys=list(batch.keys), partition_id=partition)
    return by_key, steps, {row["key"]: row["mask"] for row in rows}


def _compute(call: Call, sample: Sample, state: Mapping[str, Any] | None, pad: int) -> Output:
    from rllm_verl.compute.state import verl_estimator_state

    held = verl_estimator_state()
    if state is None:
        held.clear()
    else:
        held.load_state_dict(state)
    fields = ("advantages", "returns") if call.needs_values else ("advantages",)
    by_key, steps, _ = v1_compute(sample, call, f"rllm_{call.name}", pad, critic=call.needs_values, fields=fields)
    advantages = by_key["advantages"]
    per_step = np.array([advantages[key][positions[0]] for key, positions in steps])
    padding = np.concatenate([v for k, v in advantages.items() if k.startswith("pad")]) if pad else None
    returns = np.array([by_key["returns"][key][positions[0]] for key, positions in steps]) if call.needs_values else None
    return Output(per_step, held.state_dict(), padding, returns)


def _run(call: Call, sample: Sample, state: Mapping[str, Any] | None) -> Output:
    return _compute(call, sample, state, 0)


def _pad(call: Call, sample: Sample, n: int) -> Output:
    return _compute(call, sample, None, n)


def paths() -> list[Path]:
    """verl's v1 path (slow: every call goes through TransferQueue); none on a verl release without the v1 trainer (< 0.9)."""
    from rllm_verl.versions import verl_features

    if not verl_features().v1_trainer:
        return []
    return [
        Path(
            "verl_v1",
            "path",
            "verl",
            "verl's v1 PPOTrainer._compute_advantage on a real TransferQueue: shuffled rows, multi-output sessions, padding",
            _run,
            dtype="float32",
            max_reward=FLOAT32_MAX / 64,
            keeps_state=True,
            pad=_pad,
            configure=verl_check_options,
            fast_configure=False,
            critic_values=None,  # a value-based estimator's rows carry the critic's values in TransferQueue
            takes_transforms=True,  # algorithm.rllm_advantage_transforms
        )
    ]
