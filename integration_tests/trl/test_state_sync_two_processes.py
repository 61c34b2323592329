"""Two real processes (torchrun, gloo on CPU) keep rae's state by task identically without sending it, whatever it holds.

Runs ``benchmarks.trl_state_sync`` in its quick mode: each rank gathers the task ids of a batch (as the mixin
does), computes the advantages with its own state, and at the end the two states are compared as JSON.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_two_ranks_end_with_the_same_state_and_the_step_does_not_copy_it():
    done = subprocess.run([sys.executable, "-m", "benchmarks.trl_state_sync", "--quick"], cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 64 |") or line.startswith("| 2,000 |")]
    assert len(rows) == 2 and all(row.rstrip().endswith("| yes |") for row in rows), done.stdout
