"""The demo's kernels are pinned before torch loads: the tiny model computes the same bits whichever kernels the CPU offers.

A CPU with other instruction sets is played here by the variables that restrict torch's and MKL's choice
(``ATEN_CPU_CAPABILITY``, ``MKL_ENABLE_INSTRUCTIONS``) and by the thread count.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

DEMO_DIR = Path(__file__).resolve().parents[2] / "examples" / "demo"
# one forward and backward pass of the demo's model; prints the loss and the gradient's sums, bit for bit
PROBE = """
import sys
sys.path.insert(0, sys.argv[1])
if sys.argv[2] == "pinned":
    from kernels import pin_kernels
    pin_kernels()
import torch
from task import build_task_tokenizer
from rllm_plugins.tiny import build_tiny_model
model = build_tiny_model(build_task_tokenizer(), seed=0, hidden_size=64)
torch.manual_seed(0)
loss = torch.log_softmax(model(input_ids=torch.randint(4, 16, (16, 12))).logits, -1).sum()
loss.backward()
grad = torch.cat([p.grad.flatten() for p in model.parameters()]).double()
print(float(loss).hex(), float(grad.sum()).hex(), float((grad * grad).sum()).hex())
"""
OTHER_CPUS = [
    {},
    {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
    {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"},
]
PINNED_KEYS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MKL_ENABLE_INSTRUCTIONS")


def probe(mode: str, cpu: dict[str, str]) -> str:
    environment = {key: value for key, value in os.environ.items() if key not in PINNED_KEYS}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(DEMO_DIR), mode], capture_output=True, text=True, timeout=300, env={**environment, **cpu}, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_the_pinned_kernels_compute_the_same_bits_whichever_kernels_the_cpu_offers():
    assert len({probe("pinned", cpu) for cpu in OTHER_CPUS}) == 1


@pytest.mark.skipif("avx2" not in Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else True, reason="needs an x86-64 CPU with AVX2")
def test_unpinned_the_kernels_change_the_bits():
    """What the pinning is for: torch's and MKL's own choice of kernels gives other last bits."""
    assert probe("unpinned", OTHER_CPUS[0]) != probe("unpinned", OTHER_CPUS[2])


def test_pinning_after_torch_loaded_is_refused():
    code = f"import sys; sys.path.insert(0, {str(DEMO_DIR)!r}); import torch; from kernels import pin_kernels; pin_kernels()"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**os.environ, "MKL_CBWR": "AUTO"}, check=False)
    assert done.returncode == 1 and "RuntimeError: torch was loaded before the demo could pin its kernels" in done.stderr
