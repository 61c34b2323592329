"""Two processes (torchrun, gloo on CPU): groups straddle ranks, each rank keeps its slice of the global advantages."""

from __future__ import annotations

import json
import math
import os
import socket
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

WORKER = Path(__file__).with_name("distributed_worker.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_ranks_hold_the_slices_of_one_global_computation(tmp_path, expected_advantages):
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}", str(WORKER), str(tmp_path), "opo"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    ranks = [json.loads((tmp_path / f"rank{k}.json").read_text()) for k in (0, 1)]
    assert [r["rank"] for r in ranks] == [0, 1] and ranks[0]["world_size"] == 2
    assert len(ranks[0]["records"]) == len(ranks[1]["records"]) == 2
    for step in range(2):
        rank0, rank1 = ranks[0]["records"][step], ranks[1]["records"][step]
        gathered = torch.tensor(rank0["rewards_per_func"], dtype=torch.float32)
        assert gathered.shape == (12, 1)
        assert torch.equal(gathered, torch.tensor(rank1["rewards_per_func"], dtype=torch.float32))
        lengths = rank0["lengths"] + rank1["lengths"]  # opo needs the lengths of the other rank's half of group 1
        expected = expected_advantages(gathered, [1.0], 4, "opo", lengths=lengths)
        np.testing.assert_allclose(rank0["advantages"], expected[:6], rtol=0, atol=1e-6)
        np.testing.assert_allclose(rank1["advantages"], expected[6:], rtol=0, atol=1e-6)
        assert np.abs(expected[4:8]).max() > 0, "the straddling group carries no signal"


def test_a_bad_role_on_one_rank_fails_every_rank_with_the_same_error(tmp_path):
    """Roles are gathered before they are checked, so no rank is left waiting in a collective."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}"]
    command += ["--tee=3", "--log-dir", str(tmp_path / "logs"), str(WORKER), str(tmp_path), "rloo", "none-role-on-rank-1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode != 0
    message = "ValueError: role_column='role', completion 6 of the gathered batch: role is None; every prompt needs a role name"
    output = done.stdout + done.stderr
    for rank in (0, 1):
        assert f"[rank{rank}]: {message}" in output, output[-3000:]


def rloo_gdpo_by_hand(table: list[list[float]], weights: list[float], group: int) -> list[float]:
    """Per function and group RLOO on the present values, the weighted sum, whitening (sample std + 1e-4)."""
    total = [0.0] * len(table)
    for f, weight in enumerate(weights):
        for start in range(0, len(table), group):
            keep = [i for i in range(start, start + group) if not math.isnan(table[i][f])]
            values = [table[i][f] for i in keep]
            for i, v in zip(keep, values, strict=True):
                total[i] += weight * (v if len(values) == 1 else v - (sum(values) - v) / (len(values) - 1))
    mean, std = statistics.fmean(total), statistics.stdev(total)
    return [(t - mean) / (std + 1e-4) for t in total]


def test_normalize_then_sum_with_roles_straddling_ranks_is_one_computation_per_role(tmp_path):
    """Group 1 straddles the ranks; each role's GDPO (rloo per function, weighted sum, whitening) runs on the global batch."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}"]
    command += [str(WORKER), str(tmp_path), "rloo", "nts-roles"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    ranks = [json.loads((tmp_path / f"rank{k}.json").read_text()) for k in (0, 1)]
    straddling = []
    for step in range(2):
        rank0, rank1 = ranks[0]["records"][step], ranks[1]["records"][step]
        gathered = torch.tensor(rank0["rewards_per_func"], dtype=torch.float32)
        assert gathered.shape == (12, 2) and torch.isnan(gathered[:, 1]).sum() == 4
        roles = rank0["group_roles"]
        assert roles == rank1["group_roles"] and sorted(set(roles)) == ["judge", "solver"]
        expected = np.zeros(12)
        for role in set(roles):
            rows = [r for g, name in enumerate(roles) if name == role for r in range(4 * g, 4 * g + 4)]
            expected[rows] = rloo_gdpo_by_hand(gathered[rows].tolist(), [1.0, -0.5], 4)
        used = np.asarray(rank0["advantages"] + rank1["advantages"])
        np.testing.assert_allclose(used, expected, rtol=0, atol=1e-6)
        straddling.append(np.abs(expected[4:8]).max())
    assert max(straddling) > 0.1, "the straddling group carries no signal"


def test_kl_shaping_on_two_ranks_centres_on_the_whole_batchs_mean_kl(tmp_path):
    """Each rank shapes its rows with the mean KL over both ranks' model tokens, as one process on the whole batch would."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}"]
    command += [str(WORKER), str(tmp_path), "grpo", "kl-shaping"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    ranks = [json.loads((tmp_path / f"rank{k}.json").read_text())["records"][0]["tokens"] for k in (0, 1)]
    # one process on the whole batch, written plainly: k1 = logp - ref, the mean over every model token of both ranks
    kl, masks = [], []
    for rank in ranks:
        kl.append([[lp - rf for lp, rf in zip(row_lp, row_rf, strict=True)] for row_lp, row_rf in zip(rank["logp"], rank["ref"], strict=True)])
        masks.append(rank["mask"])
    tokens = [
        (k, m)
        for rank_kl, rank_mask in zip(kl, masks, strict=True)
        for row_kl, row_m in zip(rank_kl, rank_mask, strict=True)
        for k, m in zip(row_kl, row_m, strict=True)
    ]
    mean = sum(k for k, m in tokens if m) / sum(1 for _, m in tokens if m)
    local_means = [
        sum(k for r_kl, r_m in zip(kl[r], masks[r], strict=True) for k, m in zip(r_kl, r_m, strict=True) if m) / sum(map(sum, masks[r])) for r in (0, 1)
    ]
    assert abs(local_means[0] - local_means[1]) > 1e-4, "each rank's own mean would give the same numbers: the check would prove nothing"
    for r, rank in enumerate(ranks):
        for row, (a, row_kl, row_m) in enumerate(zip(rank["before"], kl[r], masks[r], strict=True)):
            want = [a + 0.5 * (mean - k) if m else 0.0 for k, m in zip(row_kl, row_m, strict=True)]
            np.testing.assert_allclose(rank["after"][row], want, rtol=0, atol=1e-5, err_msg=f"rank {r}, row {row}")
