"""A third-party transform joins the matrix on verl's and TRL's paths as on the collector: one twin per path.

``recentre`` here is the fixture plugin's transform (tests/plugins/fixtures/transform, whose joining the matrix by being
installed tests/plugins/test_transform_matrix.py checks), registered in user code; its twins ``<path>+test_recentre``
(:func:`transform_twin`, as an installed plugin's get them) must give the transform applied to that path's own output, on
the sample's task groups. verl's v1 path is left to ``make conformance`` (every call goes through TransferQueue).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("verl")
pytest.importorskip("trl")

from rllm_plugins import register_advantage_transform
from rllm_plugins.testing.matrix import FAST, RELATIONS, entry_of, installed_paths, run_matrix
from rllm_plugins.testing.matrix.paths import transform_twin
from rllm_plugins.transforms import unregister_advantage_transform

NAME = "test_recentre"
FAST_PATHS = {"verl_legacy": "grpo", "verl_step_bridge": "step_reinforce", "trl_outcome": "grpo", "trl_turn": "step_reinforce"}


def recentre(advantages, *, offsets, weight: float = 1.0):
    """Advantages minus ``weight`` times their group's mean (the fixture plugin's transform)."""
    sizes = np.diff(offsets)
    group = np.repeat(np.arange(sizes.size), sizes)
    means = np.bincount(group, advantages, minlength=sizes.size) / np.maximum(sizes, 1)
    return advantages - weight * means[group]


@pytest.fixture(scope="module")
def twins():
    register_advantage_transform(NAME)(recentre)
    try:
        yield {f"{p.name}+{NAME}": transform_twin(p, NAME) for p in installed_paths() if p.takes_transforms}
    finally:
        unregister_advantage_transform(NAME)


def test_every_adapter_path_that_takes_transforms_has_the_transforms_twin(twins):
    assert set(twins) >= {f"{path}+{NAME}" for path in [*FAST_PATHS, "verl_v1"]}


@pytest.mark.parametrize(("path", "estimator"), sorted(FAST_PATHS.items()))
def test_the_transforms_cells_hold_on_verl_and_trl(twins, path, estimator):
    relations = [r for r in RELATIONS if r.name in ("equals_collector", "no_token_rows", "permutation")]
    cells = run_matrix([entry_of(estimator)], [twins[f"{path}+{NAME}"]], FAST, relations)
    assert not [str(c) for c in cells if c.status == "FAIL"], [str(c) for c in cells]
    assert any(c.relation == "equals_collector" and c.status == "PASS" for c in cells), [str(c) for c in cells]
