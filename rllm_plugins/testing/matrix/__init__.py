"""The estimator conformance matrix: every estimator on every path and in every wrapper, checked by relations.

As PyTorch's OpInfo does for operators, three tables are crossed: the estimators (:mod:`.estimators`, read
from the registry, so an installed plugin joins by itself), the paths and wrappers (:mod:`.paths`; adapters
add verl's and TRL's through the entry-point group ``rllm_plugins.conformance_paths``) and the relations
(:mod:`.relations`). Each (estimator, path, relation) is a cell with a verdict (:mod:`.run`)::

    from rllm_plugins.testing.matrix import FAST, estimator_table, path_table, run_matrix

    cells = run_matrix(estimator_table(), path_table(), FAST)
    assert not [c for c in cells if c.status == "FAIL"]

Every path that takes advantage transforms is followed by its transformed twin (``<path>+transforms``,
:func:`.paths.transformed_twin`). An estimator that breaks a relation on purpose declares it in its spec (``AdvEstimatorSpec.breaks``); cells
that fail for a known reason awaiting a fix are listed in :data:`.known.KNOWN_FAILURES`.
"""

from .estimators import SAMPLES, EstimatorEntry, entry_of, estimator_table
from .known import KNOWN_FAILURES
from .paths import (
    PATHS_GROUP,
    TRANSFORMS,
    TWIN_TRANSFORMS,
    Call,
    Output,
    Path,
    centred_clipped_and_scaled,
    clipped_and_scaled,
    core_paths,
    installed_paths,
    path_table,
    transformed_twin,
)
from .relations import FAST, FULL, RELATIONS, Budget, Relation
from .run import Cell, run_cell, run_matrix, summary
from .samples import Sample, Traj, derangement, generate

__all__ = [
    "FAST",
    "FULL",
    "KNOWN_FAILURES",
    "PATHS_GROUP",
    "RELATIONS",
    "SAMPLES",
    "TRANSFORMS",
    "TWIN_TRANSFORMS",
    "Budget",
    "Call",
    "Cell",
    "EstimatorEntry",
    "Output",
    "Path",
    "Relation",
    "Sample",
    "Traj",
    "centred_clipped_and_scaled",
    "clipped_and_scaled",
    "core_paths",
    "derangement",
    "entry_of",
    "estimator_table",
    "generate",
    "installed_paths",
    "path_table",
    "run_cell",
    "run_matrix",
    "summary",
    "transformed_twin",
]
