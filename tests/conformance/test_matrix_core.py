"""The conformance matrix on the core's paths and wrappers: every cell holds, is declared, or is a known failure.

``RLLM_CONFORMANCE=full`` (``make conformance``) runs the full budget (more seeds, every scale step, every
hostile value); the default is the fast sample.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from rllm_plugins.discovery import manager
from rllm_plugins.registry import available_estimators, get_estimator
from rllm_plugins.spec import AdvEstimatorSpec
from rllm_plugins.testing.matrix import FAST, FULL, KNOWN_FAILURES, RELATIONS, core_paths, entry_of, estimator_table, run_cell, run_matrix

BUDGET = FULL if os.environ.get("RLLM_CONFORMANCE") == "full" else FAST
RELATION_NAMES = {r.name for r in RELATIONS}
CORE = {p.name: p for p in core_paths()}


def test_every_core_cell_holds_is_declared_or_known():
    cells = run_matrix(estimator_table(), list(CORE.values()), BUDGET)
    failing = [str(c) for c in cells if c.status == "FAIL"]
    assert not failing, "\n".join(failing)
    assert sum(c.status == "PASS" for c in cells) > 400


def test_declared_exceptions_name_relations_of_the_matrix():
    for name in available_estimators():
        assert set(get_estimator(name).spec.breaks) <= RELATION_NAMES, name


def test_known_failures_name_registered_estimators_and_relations():
    names = set(available_estimators())
    for estimator, path, relation in KNOWN_FAILURES:
        assert estimator in names and relation in RELATION_NAMES, (estimator, path, relation)


def test_breaks_is_checked_when_the_spec_is_built():
    with pytest.raises(ValueError, match=r"estimator 'x': breaks\['permutation'\] must be a relation name \(str\) with a non-empty reason"):
        AdvEstimatorSpec("x", fn=lambda rewards, **_: (rewards, rewards), breaks={"permutation": ""})
    assert dict(AdvEstimatorSpec("x", fn=lambda rewards, **_: (rewards, rewards)).breaks) == {}


# estimators that break one relation each, registered for one test (written plainly: group arrays in, arrays out)


def _by_position(rewards, **_):
    """r + its index in the group: shuffling the trajectories changes the values, not only their order."""
    out = [np.asarray(r, dtype=np.float64) + np.arange(len(r)) for r in rewards]
    return out, out


def _clipped(rewards, **_):
    """r - mean with r clipped at 1e20: large rewards change silently."""
    out = [np.minimum(np.asarray(r, dtype=np.float64), 1e20) - np.mean(np.minimum(r, 1e20)) for r in rewards]
    return out, out


def _list_half(rewards, **_):
    out = [np.asarray(r, dtype=np.float64) / 2 for r in rewards]
    return out, out


def _batched_whole(values, offsets, **_):
    return np.asarray(values, dtype=np.float64)


@pytest.fixture
def registered():
    """Register specs in user code for one test."""
    names: list[str] = []

    def register(spec: AdvEstimatorSpec) -> None:
        manager.add_user_estimator(manager.Estimator(spec, manager.Provider("tests", kind="user")))
        names.append(spec.name)

    yield register
    for name in names:
        manager.remove_user_estimator(name)


def _cell(name: str, path: str, relation: str):
    return run_cell(entry_of(name), CORE[path], next(r for r in RELATIONS if r.name == relation), FAST)


def test_a_new_estimator_joins_the_table_with_default_options(registered):
    registered(AdvEstimatorSpec("conformance_by_position", fn=_by_position))
    entry = next(e for e in estimator_table() if e.name == "conformance_by_position")
    assert dict(entry.options) == {} and entry.level == "outcome"


def test_an_order_dependent_estimator_fails_the_permutation_relation(registered):
    registered(AdvEstimatorSpec("conformance_by_position", fn=_by_position))
    cell = _cell("conformance_by_position", "collector", "permutation")
    assert cell.status == "FAIL" and "shuffled" in cell.message


def test_a_declared_exception_reads_declared_with_its_reason(registered):
    registered(AdvEstimatorSpec("conformance_by_position", fn=_by_position, breaks={"permutation": "ranks by position on purpose"}))
    cell = _cell("conformance_by_position", "collector", "permutation")
    assert (cell.status, cell.message) == ("declared", "ranks by position on purpose")


def test_a_batched_form_that_differs_from_the_list_form_fails_equals_collector(registered):
    registered(AdvEstimatorSpec("conformance_two_forms", fn=_list_half, batched=_batched_whole))
    assert _cell("conformance_two_forms", "list_form", "equals_collector").status == "PASS"
    cell = _cell("conformance_two_forms", "batched_form", "equals_collector")
    assert cell.status == "FAIL" and "expected" in cell.message


def test_a_silent_change_at_large_rewards_fails_the_scale_relation(registered):
    registered(AdvEstimatorSpec("conformance_clipped", fn=_clipped))
    cell = _cell("conformance_clipped", "collector", "scale")
    assert cell.status == "FAIL" and "changed silently" in cell.message


def test_a_raw_exception_is_a_failing_cell_not_an_error(registered):
    def raises(rewards, **_):
        raise TypeError("boom")

    registered(AdvEstimatorSpec("conformance_raises", fn=raises))
    cell = _cell("conformance_raises", "list_form", "permutation")
    assert (cell.status, cell.message) == ("FAIL", "raised TypeError: boom")


def test_a_config_step_that_refuses_even_the_sample_options_fails_hostile_options():
    """The relation's control: refusing every value proves nothing, so a step that refuses the valid options fails the cell."""
    import dataclasses

    def refuses_everything(name, options):
        raise ValueError(f"refused: {sorted(options)} and every option such as epsilon")

    path = dataclasses.replace(CORE["collector"], configure=refuses_everything)
    cell = run_cell(entry_of("grpo"), path, next(r for r in RELATIONS if r.name == "hostile_options"), FAST)
    assert cell.status == "FAIL" and "the sample options {} are refused at config time" in cell.message
    assert _cell("grpo", "collector", "hostile_options").status == "PASS"
