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
        assert {relation.split(":")[0] for relation in get_estimator(name).spec.breaks} <= RELATION_NAMES, name


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


# no relation holds vacuously: samples of every group size, refusals are findings, derangements move everything


def _refuses(rewards, **_):
    raise ValueError("refused: every group is refused")


def test_an_estimator_that_refuses_every_batch_fails_every_relation_that_runs(registered):
    """Before: 34 PASS, 0 FAIL under check --paths ("both refuse" counted as agreement, scale accepted the refusal)."""
    registered(AdvEstimatorSpec("conformance_refuses", fn=_refuses))
    cells = run_matrix([entry_of("conformance_refuses")], list(CORE.values()), FAST)
    ran = [c for c in cells if c.status != "n.a."]
    assert {c.relation for c in ran} == {"equals_collector", "permutation", "composite_linear", "scale"}
    assert all(c.status == "FAIL" for c in ran), [str(c) for c in ran]
    sizes = sorted(len(g) for g in entry_of("conformance_refuses").sample(0).groups)
    cell = next(c for c in ran if (c.path, c.relation) == ("list_form", "equals_collector"))
    assert cell.message == f"seed 0: the collector refused a sample the spec accepts (group sizes {sizes}): raised ValueError: refused: every group is refused"


def test_a_sample_holds_one_group_of_every_accepted_size_and_an_empty_group():
    """Before: seed 0's outcome groups had sizes [4, 4, 5, 5], so a form wrong on groups of 1-3 passed every cell."""
    for name, want in [("grpo", list(range(9))), ("passk_training", [3, 4, 5, 6, 7, 8])]:
        entry = entry_of(name)
        for seed in (0, 1, 2):
            assert sorted(len(g) for g in entry.sample(seed).groups) == want
    orders = {tuple(len(g) for g in entry_of("grpo").sample(seed).groups) for seed in range(4)}
    assert len(orders) == 4  # the seed draws the order of the groups


def _small_groups_wrong_batched(values, offsets, **_):
    """r - mean per group, but r itself for groups of fewer than 4 (a vectorisation bug on small groups)."""
    out = np.array(values, dtype=np.float64)
    for g in range(len(offsets) - 1):
        part = out[offsets[g] : offsets[g + 1]]
        if part.size >= 4:
            out[offsets[g] : offsets[g + 1]] = part - part.mean()
    return out


def _centred(rewards, **_):
    out = [np.asarray(r, dtype=np.float64) - (np.mean(r) if len(r) else 0.0) for r in rewards]
    return out, out


def test_a_batched_form_wrong_on_small_groups_fails_equals_collector(registered):
    registered(AdvEstimatorSpec("conformance_small_groups", fn=_centred, batched=_small_groups_wrong_batched))
    assert _cell("conformance_small_groups", "list_form", "equals_collector").status == "PASS"
    cell = _cell("conformance_small_groups", "batched_form", "equals_collector")
    assert cell.status == "FAIL" and cell.message.startswith("seed 0: step ")


def _first_group_special(rewards, **_):
    """r - mean per group, and the first group (by position) gets +1: it depends on where a group stands."""
    out = [np.asarray(r, dtype=np.float64) - (np.mean(r) if len(r) else 0.0) + (g == 0) for g, r in enumerate(rewards)]
    return out, out


def test_an_estimator_that_depends_on_the_first_groups_position_fails_permutation_on_the_core_paths(registered):
    """Before: the group shuffle [0, 2, 1, 3] never moved the first group, so only verl_v1's cell failed (blaming verl)."""
    registered(AdvEstimatorSpec("conformance_first_group", fn=_first_group_special))
    for path in ("collector", "list_form", "batched_form"):
        cell = _cell("conformance_first_group", path, "permutation")
        assert cell.status == "FAIL" and "shuffled" in cell.message, cell


@pytest.mark.parametrize("n", range(10))
def test_a_derangement_moves_every_element(n):
    from rllm_plugins.testing.matrix import derangement

    for seed in range(20):
        p = derangement(np.random.default_rng(seed), n).tolist()
        assert sorted(p) == list(range(n))
        assert all(p[i] != i for i in range(n)) if n >= 2 else p == list(range(n))


def test_the_permuted_sample_moves_every_group_and_every_trajectory_of_a_group_of_two_or_more():
    sample = entry_of("grpo").sample(0)
    shuffled, order = sample.permuted(np.random.default_rng(5), groups=True)
    origin = {id(traj): (g, i) for g, group in enumerate(sample.groups) for i, traj in enumerate(group)}
    for p, group in enumerate(shuffled.groups):
        for i, traj in enumerate(group):
            g, j = origin[id(traj)]
            assert g != p and (j != i or len(group) == 1)
    flat = [traj for group in sample.groups for traj in group]
    assert [flat[o] for o in order.tolist()] == [traj for group in shuffled.groups for traj in group]


def test_a_collector_that_drops_the_transforms_fails_its_twins_cell():
    """The twin is generated from the path: a collector that ignored the transforms it was given fails equals_collector."""
    import dataclasses

    from rllm_plugins.testing.matrix import transformed_twin

    base = CORE["collector"]
    dropping = dataclasses.replace(base, run=lambda call, sample, state: base.run(dataclasses.replace(call, transforms=()), sample, state))
    relation = next(r for r in RELATIONS if r.name == "equals_collector")
    cell = run_cell(entry_of("grpo"), transformed_twin(dropping), relation, FAST)
    assert cell.status == "FAIL" and "expected" in cell.message, cell
    assert _cell("grpo", "collector+transforms", "equals_collector").status == "PASS"
