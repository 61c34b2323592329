"""``rllm_turn_gae`` through verl's real ``compute_advantage`` (legacy path) against a plain token-by-token GAE over turns.

The reference reads turns token by token (a turn: a run of ``response_mask == 1``; its reward: the token rewards from
its first token, 0 for a row's first turn, up to the next turn; its value: the critic's at its first token), runs the
backward GAE loop per row, and whitens over model tokens with unbiased variance as verl's ``masked_whiten`` does.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

DOC = (Path(__file__).resolve().parents[2] / "docs" / "turn_level.md").read_text()


def multi_turn_batch(seed: int, rows: int = 6, length: int = 12, one_turn: bool = False):
    """Rows of 1-3 model turns separated by tool tokens, rewards on random tokens (tool tokens too), random values, 2 uids."""
    from verl import DataProto

    rng = np.random.default_rng(seed)
    mask = torch.zeros(rows, length, dtype=torch.int64)
    for row in range(rows):
        position = 0
        for turn in range(1 if one_turn else int(rng.integers(1, 4))):
            if turn:
                position += int(rng.integers(1, 3))  # tool tokens
            n = int(rng.integers(1, 3))
            mask[row, position : min(position + n, length)] = 1
            position += n
    rewards = torch.zeros(rows, length, dtype=torch.float32)
    for row in range(rows):
        rewards[row, rng.integers(0, length, size=2)] += torch.from_numpy(rng.normal(size=2).astype(np.float32))
    values = torch.from_numpy(rng.normal(size=(rows, length)).astype(np.float32))
    uids = np.array([f"p{row % 2}" for row in range(rows)], dtype=object)
    return DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask, "values": values}, non_tensors={"uid": uids})


def plain_turn_gae(data, gamma, lam, whiten=True):
    """Per row, token by token: turns, their rewards and values; the backward GAE loop; whitening over model tokens."""
    mask = data.batch["response_mask"].tolist()
    rewards = data.batch["token_level_rewards"].double().tolist()
    values = data.batch["values"].double().tolist()
    per_row = []
    for m, r, v in zip(mask, rewards, values, strict=True):
        starts = [t for t in range(len(m)) if m[t] and (t == 0 or not m[t - 1])]
        turns = []
        for k, start in enumerate(starts):
            end = start
            while end < len(m) and m[end]:
                end += 1
            following = starts[k + 1] if k + 1 < len(starts) else len(m)
            turns.append((list(range(start, end)), sum(r[0 if k == 0 else start : following]), v[start]))
        advantage, running = [0.0] * len(turns), 0.0
        for t in reversed(range(len(turns))):
            following_value = turns[t + 1][2] if t + 1 < len(turns) else 0.0
            running = turns[t][1] + gamma * following_value - turns[t][2] + gamma * lam * running
            advantage[t] = running
        per_row.append([(positions, a, a + value) for (positions, _, value), a in zip(turns, advantage, strict=True)])
    if whiten:
        tokens = [a for row in per_row for positions, a, _ in row for _ in positions]
        mean = sum(tokens) / len(tokens)
        var = sum((a - mean) ** 2 for a in tokens) / (len(tokens) - 1)
        per_row = [[(p, (a - mean) / math.sqrt(var + 1e-8), ret) for p, a, ret in row] for row in per_row]
    advantages, returns = np.zeros(data.batch["response_mask"].shape), np.zeros(data.batch["response_mask"].shape)
    for b, row in enumerate(per_row):
        for positions, a, ret in row:
            advantages[b, positions] = a
            returns[b, positions] = ret
    return advantages, returns


def run(data, gamma=1.0, lam=1.0, /, **kwargs):
    """verl's own compute_advantage with algorithm.adv_estimator=rllm_turn_gae, the algorithm section's gamma and lam, ``kwargs``
    as algorithm.rllm_estimator_kwargs."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.ray_trainer import compute_advantage

    config = OmegaConf.create({"gamma": gamma, "lam": lam, "rllm_estimator_kwargs": kwargs})
    out = compute_advantage(data, adv_estimator="rllm_turn_gae", gamma=gamma, lam=lam, config=config)
    return out.batch["advantages"].double().numpy(), out.batch["returns"].double().numpy()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (0.9, 0.95), (0.7, 0.0)])
def test_rllm_turn_gae_equals_a_plain_gae_over_turns_and_returns_reach_the_batch(seed, gamma, lam):
    data = multi_turn_batch(seed)
    want_advantages, want_returns = plain_turn_gae(data, gamma, lam)
    advantages, returns = run(data, gamma, lam)
    np.testing.assert_allclose(advantages, want_advantages, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(returns, want_returns, rtol=1e-5, atol=1e-5)  # data.batch["returns"]: the critic's targets


def test_lam_one_gives_the_return_to_go_of_turns_minus_the_value_and_zero_values_the_discounted_return():
    data = multi_turn_batch(11)
    advantages, returns = run(data, 0.8, 1.0, whiten=False)
    mask = data.batch["response_mask"].numpy()
    token_rewards = data.batch["token_level_rewards"].double().numpy()
    for b in range(mask.shape[0]):
        starts = [t for t in range(mask.shape[1]) if mask[b, t] and (t == 0 or not mask[b, t - 1])]
        turn_rewards = [token_rewards[b, 0 if k == 0 else s : starts[k + 1] if k + 1 < len(starts) else None].sum() for k, s in enumerate(starts)]
        for k, s in enumerate(starts):
            to_go = sum(0.8**j * turn_rewards[k + j] for j in range(len(starts) - k))
            assert advantages[b, s] == pytest.approx(to_go - float(data.batch["values"][b, s]), abs=1e-5)
            assert returns[b, s] == pytest.approx(to_go, abs=1e-5)
    data.batch["values"] = torch.zeros_like(data.batch["values"])
    advantages, returns = run(data, 0.8, 1.0, whiten=False)
    np.testing.assert_allclose(advantages, returns, atol=1e-6)  # V = 0: the advantage is the discounted return itself


def test_one_turn_per_row_gives_one_advantage_per_row():
    data = multi_turn_batch(3, one_turn=True)
    advantages, _ = run(data, 0.9, 0.9)
    mask = data.batch["response_mask"].numpy().astype(bool)
    for b in range(mask.shape[0]):
        assert np.unique(advantages[b][mask[b]]).size == 1
        assert not advantages[b][~mask[b]].any()


def test_algorithm_lam_is_used_unless_the_estimator_kwargs_set_lam():
    data = multi_turn_batch(5)
    from_algorithm, _ = run(data, 0.9, 0.5)
    from_kwargs, _ = run(data, 0.9, 1.0, lam=0.5)
    np.testing.assert_allclose(from_algorithm, from_kwargs)
    np.testing.assert_allclose(from_algorithm, plain_turn_gae(data, 0.9, 0.5)[0], rtol=1e-4, atol=1e-5)


def test_without_the_critics_values_the_error_names_critic_enable():
    data = multi_turn_batch(0)
    data.batch.pop("values")
    with pytest.raises(ValueError, match=r"rllm_turn_gae' is value-based: it reads the critic's values.*set critic.enable=true"):
        run(data)


def test_a_non_finite_value_is_named_by_row_uid_and_turn():
    data = multi_turn_batch(0)
    first = int(np.flatnonzero(data.batch["response_mask"][1].numpy())[0])
    data.batch["values"][1, first] = float("nan")
    with pytest.raises(ValueError, match=r"row 1 \(uid 'p1'\), turn 0 has critic value nan"):
        run(data)


def test_verl_check_refuses_rllm_turn_gae_without_a_critic_and_passes_it_with_one_on_both_trainers():
    from rllm_verl.tools.check import verl_check

    off = verl_check(["algorithm.adv_estimator=rllm_turn_gae"])
    assert not off.ok
    assert "set critic.enable=true" in off.errors[0] and "value-based" in off.errors[0]
    for v1 in ("true", "false"):
        report = verl_check(["algorithm.adv_estimator=rllm_turn_gae", "critic.enable=true", f"trainer.use_v1={v1}", "algorithm.gamma=0.9"])
        assert report.ok, report.errors
        values_line = next(line for line in report.step_level if line.startswith("values:"))
        assert "first model token" in values_line and "lam=1.0 (from algorithm.lam)" in values_line
    bad = verl_check(["algorithm.adv_estimator=rllm_turn_gae", "critic.enable=true", "+algorithm.rllm_estimator_kwargs.lam=2.0"])
    assert not bad.ok and "lam" in bad.errors[0]


def test_the_docs_worked_example_is_what_verl_gae_and_rllm_turn_gae_compute():
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    text = DOC.split("### How it differs from verl's token-level `gae` on multi-turn rows", 1)[1].split("\n## ", 1)[0]

    def row(label):
        cells = re.search(rf"^\| {re.escape(label)} \| (.*) \|$", text, re.M)[1].split(" | ")
        return [None if c == "—" else float(c) for c in cells]

    mask, values = row("`response_mask`"), row("critic `values`")
    rewards = torch.zeros(1, len(mask), dtype=torch.float64)
    rewards[0, -1] = 1.0
    assert "reward 1 on the last token, \u03b3 = 0.9, \u03bb = 0.95" in text
    got = {}
    for name in ("gae", "rllm_turn_gae"):
        data = DataProto.from_dict(
            tensors={"token_level_rewards": rewards, "response_mask": torch.tensor([mask]).long(), "values": torch.tensor([values], dtype=torch.float64)},
            non_tensors={"uid": np.array(["p"], dtype=object)},
        )
        out = compute_advantage(data, adv_estimator=name, gamma=0.9, lam=0.95, config=OmegaConf.create({"gamma": 0.9, "lam": 0.95}))
        got[name] = [round(float(x), 4) if m else None for x, m in zip(out.batch["returns"][0], mask, strict=True)]
    assert got["gae"] == row("`gae` returns")
    assert got["rllm_turn_gae"] == row("`rllm_turn_gae` returns")
    assert "`A = 0.14 + 0.855 \u00d7 0.4 = 0.482`" in text and round(0.9 * 0.6 - 0.4 + 0.9 * 0.95 * (1 - 0.6), 6) == 0.482
