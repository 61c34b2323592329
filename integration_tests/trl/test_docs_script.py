"""The complete script of docs/trl.md, extracted from the page and run as a user would: it trains, and the reward rises."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "trl.md"
RESULT = re.compile(r"^mean reward: first 5 steps (\d+\.\d+), last 5 steps (\d+\.\d+)$", re.M)


def docs_script() -> str:
    blocks = [b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S) if "trainer.train()" in b and "build_tiny_tokenizer" in b]
    assert len(blocks) == 1, f"docs/trl.md should hold one complete script, found {len(blocks)}"
    return blocks[0]


def test_the_docs_script_runs_offline_and_learns(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(docs_script())
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    found = RESULT.search(done.stdout)
    assert found, done.stdout[-2000:]
    first, last = map(float, found.groups())
    assert first < 0.1 and last > first + 0.15, (first, last)
    metrics = done.stdout.splitlines()[-1]
    assert "'reward/all_groups/mean'" in metrics and "'advantage/all_groups/fraction_zero'" in metrics
