"""``rllm-plugins check NAME --paths``: a third-party estimator through every installed path and wrapper, as a table of cells."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rllm_plugins import cli

pytest.importorskip("verl")
pytest.importorskip("trl")


@pytest.fixture(scope="module", autouse=True)
def _stop_transfer_queue():
    """The v1 path starts Ray and TransferQueue in this process: stop them after this module."""
    yield
    from rllm_verl.conformance.v1 import close

    close()


RELATIONS = [
    "equals_collector",
    "no_token_rows",
    "permutation",
    "composite_linear",
    "state_roundtrip",
    "state_order",
    "scale",
    "hostile_options",
    "option_sensitivity",
]


def _table(out: str) -> dict[str, dict[str, str]]:
    """The printed table: path -> relation -> status."""
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("PATH "))
    assert lines[header].split() == ["PATH", *RELATIONS]
    rows = {}
    for line in lines[header + 1 :]:
        if not line.strip():
            break
        path, *statuses = line.split()
        rows[path] = dict(zip(RELATIONS, statuses, strict=True))
    return rows


def test_the_example_plugin_passes_on_every_path_it_takes(capsys):
    code = cli.main(["check", "median_baseline", "--paths"])
    out = capsys.readouterr().out
    table = _table(out)
    assert code == 0
    assert (
        table["verl_legacy"]
        == table["verl_v1"]
        == dict.fromkeys(RELATIONS, "PASS")
        | {
            "state_roundtrip": "n.a.",
            "state_order": "n.a.",
            "hostile_options": "n.a.",
            "option_sensitivity": "n.a.",
        }
    )
    assert table["trl_outcome"]["equals_collector"] == "PASS" and table["trl_turn"]["equals_collector"] == "n.a."  # outcome-level
    assert table["collector"]["equals_collector"] == "n.a."  # the reference
    assert "FAIL" not in out


def test_a_step_level_plugin_runs_on_the_step_paths(load_plugins, capsys):
    load_plugins()
    code = cli.main(["check", "last_turn_baseline", "--paths", "--json"])
    cells = {(c["path"], c["relation"]): c["status"] for c in json.loads(capsys.readouterr().out)}
    assert code == 0
    for path in ("collector", "list_form", "batched_form", "verl_step_bridge", "verl_v1", "trl_turn"):
        assert cells[(path, "permutation")] == "PASS", path
    for path in ("verl_step_bridge", "verl_v1", "trl_turn", "composite_term", "list_form"):
        assert cells[(path, "equals_collector")] == "PASS", path
    assert cells[("verl_step_bridge", "no_token_rows")] == cells[("verl_v1", "no_token_rows")] == cells[("trl_turn", "no_token_rows")] == "PASS"
    assert cells[("verl_legacy", "equals_collector")] == cells[("trl_outcome", "equals_collector")] == "n.a."  # outcome-level paths


def test_a_failing_cell_exits_1_and_says_why(capsys):
    from rllm_plugins.discovery import manager
    from rllm_plugins.spec import AdvEstimatorSpec

    def by_position(rewards, **_):
        """r + its index in the group: not permutation-equivariant."""
        out = [np.asarray(r, dtype=np.float64) + np.arange(len(r)) for r in rewards]
        return out, out

    manager.add_user_estimator(manager.Estimator(AdvEstimatorSpec("conformance_by_position", fn=by_position), manager.Provider("tests", kind="user")))
    try:
        code = cli.main(["check", "conformance_by_position", "--paths"])
    finally:
        manager.remove_user_estimator("conformance_by_position")
    out = capsys.readouterr().out
    assert code == 1
    assert _table(out)["collector"]["permutation"] == "FAIL"
    assert "FAIL: collector x permutation: seed 0, shuffled: step" in out
    assert "samples of seed 0 (--seed):" in out
