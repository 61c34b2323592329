"""``import rllm_plugins`` and estimator discovery leave out the standard-library modules only a few calls need.

Each of them is imported inside the function that uses it (start-up time: ``benchmarks/startup.py``). The check runs
in a fresh interpreter and counts only what the import added, whatever the interpreter had loaded before it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

LAZY = {
    "json": "EstimatorState.to_json/from_json, transforms given as a JSON string",
    "difflib": "near misses of trainer config keys, anchor similarity",
    "uuid": "the uid of a Trajectory made without one",
}


def test_import_and_discovery_leave_out_the_modules_only_some_calls_need():
    code = textwrap.dedent(
        f"""
        import sys
        before = set(sys.modules)
        import rllm_plugins
        from rllm_plugins.registry import get_estimator
        get_estimator("grpo")
        rllm_plugins.available_estimators()
        print(sorted(m for m in {sorted(LAZY)!r} if m in sys.modules and m not in before))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    imported = out.stdout.strip().splitlines()[-1]
    assert imported == "[]", f"import rllm_plugins imported {imported}; import them where they are used: {LAZY}"


def test_the_calls_that_need_them_still_import_them():
    code = textwrap.dedent(
        """
        import sys
        from rllm_plugins import Trajectory
        from rllm_plugins.state.store import EstimatorState
        from rllm_plugins.steps.similarity import similar_anchor_ids
        import numpy as np
        uid = Trajectory().uid
        text = EstimatorState().to_json()
        again = EstimatorState.from_json(text).to_json()
        ids = similar_anchor_ids(np.array([0, 1]), ["abcd", "abce"], np.array([0, 0]), 0.5)
        print(len(uid), text == again, ids.tolist(), [m in sys.modules for m in ("uuid", "json", "difflib")])
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == "36 True [0, 0] [True, True, True]"
