"""Every installed reward shaper (built-ins, user registrations, plugins) on every path against the collector.

One generated batch per seed (groups of 2-6 answers, binary or graded rewards, prompts and answers of uneven length,
a verl padding row); the same shaper list on:

- the core collector (the reference), an estimator ``E`` and the shaper;
- verl's legacy ``compute_advantage`` with ``rllm_E`` (the ``rllm_*`` run shapes its rows);
- verl's legacy ``compute_advantage`` with verl's own ``grpo`` (the shaped ``token_level_rewards`` for its call), against
  the collector's ``verl_grpo`` (verl's formula);
- TRL's ``compute_advantages`` with ``E``, its context as the trainer gathers it.

Each path must give the collector's advantages on every answer, and verl's padding row 0.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

pytest.importorskip("verl")
pytest.importorskip("trl")

import rllm_verl.plugin  # noqa: F401 - installs the extensions, as verl's entry point does
import torch
from omegaconf import OmegaConf
from rllm_trl.outcome import compute_advantages, prepare_batch
from verl import DataProto
from verl.trainer.ppo import ray_trainer

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.shaper_spec import shaper_context, shaper_options
from rllm_plugins.shaping import resolve_shapers
from rllm_plugins.shaping.registry import all_shapers
from rllm_plugins.shaping.stage import Shapers

WIDTH, PROMPT = 12, 6
REQUIRED = {"dapo_overlong": {"max_length": WIDTH, "buffer": 5}, "turn_penalty": {"coef": 0.05}, "linear_length_penalty": {"max_length": WIDTH}}
COLLECTOR_GIVES = {"offsets", "scores", "lengths", "input_lengths", "turns", "role"}


def entries():
    out = []
    for name, shaper in sorted(all_shapers().items()):
        missing = [k for k, v in shaper_options(shaper.spec).items() if v is inspect.Parameter.empty and k not in REQUIRED.get(name, {})]
        if missing:  # a plugin's shaper with options of its own to give: left to its own checks
            continue
        out.append({"name": name, **REQUIRED.get(name, {})})
    return out


def sample(seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 7, 3) if seed % 2 else np.full(3, rng.integers(2, 7))  # TRL's groups are all num_generations
    n = int(sizes.sum())
    rewards = rng.integers(0, 2, n).astype(float) if seed % 2 else rng.choice([0.0, 0.5, 1.0, 1.5], n)
    lengths = rng.integers(1, WIDTH + 1, n)
    prompts = rng.integers(1, PROMPT + 1, n)
    for g, (a, b) in enumerate(zip(np.concatenate([[0], np.cumsum(sizes)[:-1]]), np.cumsum(sizes), strict=True)):
        prompts[a:b] = 1 + (g + seed) % PROMPT  # one prompt per group, as the frameworks have it
    uids = np.repeat([f"q{g}" for g in range(sizes.size)], sizes)
    return rewards, lengths, prompts, uids, sizes


def collector(entry, estimator, rewards, lengths, prompts, uids):
    groups = {}
    for r, n, p, uid in zip(rewards, lengths, prompts, uids, strict=True):
        groups.setdefault(uid, []).append(Trajectory(steps=[Step(prompt_ids=[3] * int(p), response_ids=[7] * int(n))], reward=float(r)))
    built = [TrajectoryGroup(trajectories, group_id=uid) for uid, trajectories in groups.items()]
    collect_reward_and_advantage_from_trajectory_groups(built, AlgorithmConfig(estimator=estimator, reward_shapers=[entry]))
    return np.array([t.steps[0].advantage for g in built for t in g.trajectories])


def verl_rows(entry, estimator, rewards, lengths, prompts, uids):
    n = rewards.size + 1  # and a padding row
    mask = torch.zeros(n, WIDTH, dtype=torch.int64)
    attention = torch.zeros(n, PROMPT + WIDTH, dtype=torch.int64)
    token_rewards = torch.zeros(n, WIDTH, dtype=torch.float64)
    for row in range(rewards.size):
        mask[row, : lengths[row]] = 1
        attention[row, PROMPT - prompts[row] : PROMPT + lengths[row]] = 1
        token_rewards[row, lengths[row] - 1] = rewards[row]
    tensors = {"token_level_rewards": token_rewards, "token_level_scores": token_rewards.clone(), "response_mask": mask, "attention_mask": attention}
    data = DataProto.from_dict(tensors=tensors, non_tensors={"uid": np.array([*uids, "pad"], dtype=object)})
    config = OmegaConf.create({"gamma": 1.0, "lam": 1.0, "norm_adv_by_std_in_grpo": True, "rllm_reward_shapers": [entry]})
    out = ray_trainer.compute_advantage(data, estimator, config=config).batch["advantages"].numpy()
    assert not out[-1].any(), "the padding row keeps 0"
    return out[:-1, 0]


def trl(entry, estimator, rewards, lengths, prompts, sizes):
    size = int(sizes[0])
    if not (sizes == size).all():
        return None  # TRL's groups are num_generations each
    batch = prepare_batch(torch.tensor(rewards, dtype=torch.float64)[:, None], torch.ones(1), size)
    context = {"lengths": lengths.astype(float), "input_lengths": prompts.astype(float), "tool_lengths": np.zeros(rewards.size), "turns": np.ones(rewards.size)}
    return compute_advantages(batch, estimator, shapers=Shapers(resolve_shapers([entry], "test"), "test", context))


ENTRIES = entries()


def test_every_builtin_shaper_is_in_the_matrix():
    assert {e["name"] for e in ENTRIES} >= {
        "dapo_overlong",
        "length_penalty",
        "linear_length_penalty",
        "efficiency_bonus",
        "group_length_penalty",
        "turn_penalty",
    }


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["name"])
def test_the_shaper_gives_the_collectors_advantages_on_every_path(entry, seed):
    spec = all_shapers()[entry["name"]].spec
    rewards, lengths, prompts, uids, sizes = sample(seed)
    if set(spec.requires) | shaper_context(spec) <= COLLECTOR_GIVES:
        want = collector(entry, "rloo", rewards, lengths, prompts, uids)
        np.testing.assert_allclose(verl_rows(entry, "rllm_rloo", rewards, lengths, prompts, uids), want, rtol=0, atol=1e-9, err_msg="verl rllm_rloo")
        np.testing.assert_allclose(
            verl_rows(entry, "grpo", rewards, lengths, prompts, uids), collector(entry, "verl_grpo", rewards, lengths, prompts, uids), rtol=0, atol=1e-5,
            err_msg="verl's own grpo",
        )  # fmt: skip
        theirs = trl(entry, "rloo", rewards, lengths, prompts, sizes)
        assert (theirs is None) == bool(seed % 2), "even seeds give TRL's equal groups"
        if theirs is not None:
            np.testing.assert_allclose(theirs, want, rtol=0, atol=1e-9, err_msg="TRL")
    else:  # a shaper reading tool tokens: verl and TRL against each other (the collector gives none)
        theirs = trl(entry, "rloo", rewards, lengths, prompts, sizes)
        if theirs is not None:
            np.testing.assert_allclose(verl_rows(entry, "rllm_rloo", rewards, lengths, prompts, uids), theirs, rtol=0, atol=1e-9)
