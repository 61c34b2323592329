"""An installed third-party transform joins the conformance matrix as an installed estimator does: one twin per path.

The fixture distribution ``rllm-fixture-transform`` offers ``recentre`` (a group statistic); with it installed, every
path that takes transforms has a twin ``<path>+recentre``, checked by the matrix's relations against the transform
applied to that path's own output, and ``rllm-plugins check recentre`` passes the transform's own rules.
"""

from __future__ import annotations

import dataclasses

import pytest

from rllm_plugins.testing.matrix import FAST, RELATIONS, core_paths, entry_of, run_cell, run_matrix
from rllm_plugins.testing.matrix.paths import transform_table, transform_twin
from rllm_plugins.transforms.contract import check_transform

RELATION = {r.name: r for r in RELATIONS}


def test_an_installed_transform_gets_a_twin_of_every_path_that_takes_transforms(load_plugins):
    """Before: the matrix crossed the estimators with clip, scale and whiten only; an installed transform had no cell."""
    load_plugins()
    assert "recentre" in transform_table() and not {"clip", "scale", "whiten", "codapo", "kl_shaping"} & set(transform_table())
    names = [p.name for p in core_paths()]
    assert names[:2] == ["collector", "collector+transforms"] and "collector+recentre" in names
    assert [n for n in names if "recentre" in n] == ["collector+recentre"]  # the core's one path that takes transforms


@pytest.mark.parametrize("estimator", ["grpo", "step_reinforce"])
def test_the_installed_transforms_cells_hold_on_the_collector(load_plugins, estimator):
    load_plugins()
    twin = next(p for p in core_paths() if p.name == "collector+recentre")
    cells = run_matrix([entry_of(estimator)], [twin], FAST)
    assert not [str(c) for c in cells if c.status == "FAIL"]
    assert {c.relation for c in cells if c.status == "PASS"} >= {"equals_collector", "permutation"}


def test_a_path_that_hands_the_transform_other_groups_fails_its_cell(load_plugins):
    """The twin's reference is the transform on the sample's task groups: a collector that ran every trajectory as one group fails."""
    load_plugins()
    from rllm_plugins.testing.matrix.paths import COLLECTOR, Sample

    def one_group(call, sample, state):
        merged = Sample((tuple(t for group in sample.groups for t in group),), sample.level)
        return COLLECTOR.run(call, merged, state)

    wrong = transform_twin(dataclasses.replace(COLLECTOR, run=one_group), "recentre")
    cell = run_cell(entry_of("reinforce"), wrong, RELATION["equals_collector"], FAST)
    assert cell.status == "FAIL" and "expected" in cell.message, cell


def test_the_installed_transform_keeps_its_own_rules(load_plugins):
    load_plugins()
    report = check_transform("recentre")
    assert report.ok, str(report)
    assert len(report.results) == 8


def test_a_transform_registered_in_user_code_leaves_the_tables_as_they_are():
    """A test module's registration (made when pytest collects it) must not add twins to every matrix of the run."""
    from rllm_plugins import register_advantage_transform
    from rllm_plugins.transforms import unregister_advantage_transform

    before = [p.name for p in core_paths()]
    register_advantage_transform("test_user_only")(lambda advantages: advantages.copy())
    try:
        assert "test_user_only" not in transform_table() and [p.name for p in core_paths()] == before
    finally:
        unregister_advantage_transform("test_user_only")
