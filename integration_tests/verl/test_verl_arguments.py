"""Every argument verl's ``compute_advantage`` takes beside the batch, the name and the config reaches the ``rllm_*`` estimator.

verl gives ``gamma`` and ``lam`` only to its own ``gae`` and ``norm_adv_by_std_in_grpo`` only to its own ``grpo``; an
``rllm_*`` estimator reads them from the config (``algorithm.gamma``, ...) and, where the config lacks them, from the
arguments of the call: verl's ``compute_advantage``, v1's ``compute_advantage_for_multi_trajectories`` (several outputs per
session), or the registered function called directly. The references: rLLM's grpo written plainly for the norm flag
(verl's own ``grpo`` where it agrees), verl's own ``gae`` given the same arguments for gamma and lam, on rows whose turns
are one model token each (where a GAE over turns and verl's GAE over model tokens are the same recursion; their returns,
the critic's targets, are compared).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.ray_trainer import compute_advantage

TURN_AT = (0, 3, 6)  # one model token per turn, tool tokens between
LENGTH = 9


def turn_rows(seed: int, rows: int = 6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, np.ndarray]:
    """Rows of 1-3 one-token turns, rewards on model tokens, random critic values; two uids."""
    rng = np.random.default_rng(seed)
    mask = torch.zeros(rows, LENGTH, dtype=torch.int64)
    for b in range(rows):
        mask[b, list(TURN_AT[: int(rng.integers(1, 4))])] = 1
    rewards = torch.zeros(rows, LENGTH)
    rewards[mask.bool()] = torch.from_numpy(rng.normal(size=int(mask.sum())).astype(np.float32))
    values = torch.from_numpy(rng.normal(size=(rows, LENGTH)).astype(np.float32))
    return rewards, mask, values, np.array([f"p{b % 2}" for b in range(rows)], dtype=object)


def batch(rewards, mask, values, uids) -> DataProto:
    return DataProto.from_dict(
        tensors={"token_level_rewards": rewards.clone(), "response_mask": mask.clone(), "values": values.clone()}, non_tensors={"uid": uids}
    )


def verl_own(name: str, data: DataProto, **arguments) -> tuple[np.ndarray, np.ndarray]:
    """verl's own estimator (its gae needs a config object, which may be empty)."""
    out = compute_advantage(data, adv_estimator=name, config=OmegaConf.create({}), **arguments)
    return out.batch["advantages"].double().numpy(), out.batch["returns"].double().numpy()


def through(entry: str, name: str, data: DataProto, **arguments) -> tuple[np.ndarray, np.ndarray]:
    """``rllm_<name>`` on one entry path, given ``arguments`` and no config value for them."""
    if entry == "compute_advantage without a config":
        out = compute_advantage(data, adv_estimator=f"rllm_{name}", **arguments)
    elif entry == "compute_advantage, a config without the keys":
        out = compute_advantage(data, adv_estimator=f"rllm_{name}", config=OmegaConf.create({"rllm_estimator_kwargs": {}}), **arguments)
    else:  # the function verl registered, called as verl calls its own gae and grpo
        fn = core_algos.get_adv_estimator_fn(f"rllm_{name}")
        tensors = data.batch
        advantages, returns = fn(
            token_level_rewards=tensors["token_level_rewards"],
            response_mask=tensors["response_mask"],
            index=data.non_tensor_batch["uid"],
            values=tensors["values"],
            **arguments,
        )
        return advantages.double().numpy(), returns.double().numpy()
    return out.batch["advantages"].double().numpy(), out.batch["returns"].double().numpy()


ENTRIES = ("compute_advantage without a config", "compute_advantage, a config without the keys", "the registered function")


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize(("gamma", "lam"), [(0.9, 0.5), (0.9, 0.95), (0.6, 0.0)])
def test_gamma_and_lam_reach_rllm_turn_gae_as_they_reach_verls_gae(entry, gamma, lam):
    """Before: lam was read only from algorithm.lam, so without it lam = 0.5 and 0.95 gave the same (lam = 1) numbers."""
    rows = turn_rows(7)
    _, want = verl_own("gae", batch(*rows), gamma=gamma, lam=lam)
    _, got = through(entry, "turn_gae", batch(*rows), gamma=gamma, lam=lam)
    mask = rows[1].numpy().astype(bool)
    np.testing.assert_allclose(got[mask], want[mask], rtol=1e-5, atol=1e-5)


def plain_grpo(data: DataProto, norm: bool) -> np.ndarray:
    """rLLM's grpo per uid written plainly: ``r - mean``, divided by the population std + 1e-6 when ``norm``; on every model token."""
    rewards = data.batch["token_level_rewards"].double().sum(-1).tolist()
    uids = data.non_tensor_batch["uid"].tolist()
    out = []
    for r, uid in zip(rewards, uids, strict=True):
        group = [x for x, u in zip(rewards, uids, strict=True) if u == uid]
        mean = sum(group) / len(group)
        std = (sum((x - mean) ** 2 for x in group) / len(group)) ** 0.5
        out.append((r - mean) / (std + 1e-6) if norm else r - mean)
    return np.array(out)[:, None] * data.batch["response_mask"].numpy()


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("norm", [False, True])
def test_norm_adv_by_std_in_grpo_reaches_rllm_grpo(entry, norm):
    """Before: without a config rllm_grpo always divided by the std. Without it, verl's grpo agrees (with it, verl's divides by
    the unbiased std, rLLM's by the population std)."""
    rows = turn_rows(3)
    got, _ = through(entry, "grpo", batch(*rows), norm_adv_by_std_in_grpo=norm)
    np.testing.assert_allclose(got, plain_grpo(batch(*rows), norm), rtol=1e-5, atol=1e-6)
    if not norm:
        np.testing.assert_allclose(got, verl_own("grpo", batch(*rows), norm_adv_by_std_in_grpo=False)[0], rtol=1e-5, atol=1e-6)


def session_batch(seed: int) -> tuple[DataProto, list[str], DataProto]:
    """v1 rows of sessions of 1-2 outputs (each output one-token turns) and, per session, its outputs concatenated in one row."""
    rewards, mask, values, _ = turn_rows(seed, rows=8)
    keys = [f"p{b // 2 % 2}_{b // 2}_{b % 2}" for b in range(8)]  # rows 2s and 2s + 1: outputs 0 and 1 of session s
    row_uids = np.array([key.rsplit("_", 2)[0] for key in keys], dtype=object)
    joined = [torch.cat([t[b], t[b + 1]]).unsqueeze(0) for b in range(0, 8, 2) for t in (rewards, mask, values)]
    whole = batch(*(torch.cat(joined[i::3]) for i in range(3)), np.array(row_uids[::2], dtype=object))
    return batch(rewards, mask, values, row_uids), keys, whole


def test_gamma_and_lam_reach_a_session_of_several_outputs_on_v1():
    """compute_advantage_for_multi_trajectories with sessions of two outputs: one episode whose turns are both outputs' turns."""
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    data, keys, whole = session_batch(5)
    for gamma, lam in [(0.9, 0.5), (0.8, 0.95)]:
        _, want = verl_own("gae", whole, gamma=gamma, lam=lam)
        out = compute_advantage_for_multi_trajectories(data, keys, "rllm_turn_gae", gamma=gamma, lam=lam)
        got = out.batch["returns"].double().numpy()
        got_joined = np.concatenate([got[0::2], got[1::2]], axis=1)  # each session's two outputs side by side, as in ``whole``
        mask = whole.batch["response_mask"].numpy().astype(bool)
        np.testing.assert_allclose(got_joined[mask], want[mask], rtol=1e-5, atol=1e-5)


def test_the_config_wins_where_it_has_the_key():
    """verl's trainers pass algorithm.gamma both as the argument and in the config (equal); where a caller gives both, the config's is read."""
    rows = turn_rows(2)
    _, want = verl_own("gae", batch(*rows), gamma=0.7, lam=0.3)
    config = OmegaConf.create({"gamma": 0.7, "lam": 0.3})
    out = compute_advantage(batch(*rows), adv_estimator="rllm_turn_gae", gamma=0.2, lam=0.9, config=config)
    mask = rows[1].numpy().astype(bool)
    np.testing.assert_allclose(out.batch["returns"].double().numpy()[mask], want[mask], rtol=1e-5, atol=1e-5)
