"""The conformance matrix on verl's and TRL's paths: every cell holds, is declared, or is a known failure.

Each path's transformed twin (``<path>+transforms``) is in the matrix; at the end, verl's own estimators (every
``adv_estimator`` verl registers, not ``rllm_*``) with ``algorithm.rllm_advantage_transforms`` on the legacy and the
v1 path: their advantages are verl's own without transforms, clipped and scaled plainly here, at every model token.

``RLLM_CONFORMANCE=full`` (``make conformance``) runs the full budget, ``rllm-plugins verl-check`` on every
hostile option value included; the default is the fast sample.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("verl")
pytest.importorskip("trl")

from rllm_verl.conformance.legacy import verl_compute
from rllm_verl.conformance.v1 import v1_compute
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

from rllm_plugins.discovery import manager
from rllm_plugins.spec import AdvEstimatorSpec
from rllm_plugins.testing.matrix import (
    FAST,
    FULL,
    KNOWN_FAILURES,
    RELATIONS,
    TRANSFORMS,
    Call,
    entry_of,
    estimator_table,
    installed_paths,
    path_table,
    run_cell,
    run_matrix,
    transformed_twin,
)
from rllm_plugins.testing.matrix.estimators import GROUP_SIZES
from rllm_plugins.testing.matrix.samples import generate

FULL_MATRIX = os.environ.get("RLLM_CONFORMANCE") == "full"
BUDGET = FULL if FULL_MATRIX else FAST
SLOW_PATHS = {"verl_v1", "verl_v1+transforms"}  # every call goes through TransferQueue: the fast sample runs a few estimators there
FAST_ON_SLOW_PATHS = ("grpo", "rloo", "prpo", "gigpo", "step_reinforce", "rae")  # rae: the stateful scan
TWIN_ON_SLOW_PATHS = ("equals_collector", "no_token_rows", "state_roundtrip")  # the fast sample's relations on verl_v1+transforms


@pytest.fixture(scope="module")
def adapter_paths():
    from rllm_verl.conformance.v1 import close

    yield {p.name: p for p in installed_paths()}
    close()  # the Ray and TransferQueue the v1 path started


@pytest.mark.parametrize("framework", ["verl", "trl"])
def test_every_adapter_cell_holds_is_declared_or_known(adapter_paths, framework):
    paths = [p for p in adapter_paths.values() if p.framework == framework and p.name not in SLOW_PATHS]
    cells = run_matrix(estimator_table(), paths, BUDGET)
    failing = [str(c) for c in cells if c.status == "FAIL"]
    assert not failing, "\n".join(failing)
    assert sum(c.status == "PASS" for c in cells) > 60


def test_every_v1_cell_holds_is_declared_or_known(adapter_paths):
    entries = [e for e in estimator_table() if FULL_MATRIX or e.name in FAST_ON_SLOW_PATHS]
    twin = [r for r in RELATIONS if FULL_MATRIX or r.name in TWIN_ON_SLOW_PATHS]
    cells = run_matrix(entries, [adapter_paths["verl_v1"]], BUDGET) + run_matrix(entries, [adapter_paths["verl_v1+transforms"]], BUDGET, twin)
    failing = [str(c) for c in cells if c.status == "FAIL"]
    assert not failing, "\n".join(failing)
    assert sum(c.status == "PASS" for c in cells) >= 6 * len(entries)


@pytest.mark.parametrize(
    ("path", "checked"),
    [
        ("verl_step_bridge", ("equals_collector", "no_token_rows", "permutation", "scale")),
        ("verl_v1", ("equals_collector", "no_token_rows")),  # the rest of its cells: the full matrix
    ],
)
def test_a_value_based_estimator_gets_the_critics_values_on_verls_step_paths(adapter_paths, path, checked):
    """turn_gae's cells run (the batch carries each step's value; its returns are checked too) instead of being n.a."""
    cells = run_matrix([entry_of("turn_gae")], [adapter_paths[path]], FAST, [r for r in RELATIONS if r.name in checked])
    assert {c.relation: c.status for c in cells} == dict.fromkeys(checked, "PASS"), [str(c) for c in cells]


def test_verls_config_time_takes_a_value_based_estimator_with_its_critic(adapter_paths):
    """verl-check refuses turn_gae without critic.enable=true; the paths' config step sets it for value-based estimators."""
    entry = entry_of("turn_gae")
    adapter_paths["verl_step_bridge"].configure(entry.name, dict(entry.options))  # no ValueError


@pytest.mark.parametrize("name", ["composite", "passk_training", "pkpo"])
def test_verls_config_time_takes_every_sample_option_as_a_user_would_write_it(adapter_paths, name):
    """composite's nested terms go in as a Hydra list, pass@k's k against the samples' largest group (rollout.n): hostile_options' control."""
    entry = entry_of(name)
    adapter_paths["verl_step_bridge"].configure(entry.name, dict(entry.options))  # no ValueError
    if name == "composite":  # the terms are read, not dropped: a misspelt one is refused
        with pytest.raises(ValueError, match="Unknown advantage estimator 'rlo'"):
            adapter_paths["verl_step_bridge"].configure("composite", {"terms": [["grpo", 0.5], ["rlo", 0.5]]})


def test_the_adapters_contribute_their_paths(adapter_paths):
    paths = {"verl_legacy", "verl_step_bridge", "verl_v1", "trl_outcome", "trl_turn"}
    assert set(adapter_paths) == paths | {f"{name}+transforms" for name in paths}


def test_known_failures_name_installed_paths():
    names = {p.name for p in path_table()}
    assert {path for _, path, _ in KNOWN_FAILURES} <= names


def _half_list(rewards, **_):
    out = [np.asarray(r, dtype=np.float64) / 2 for r in rewards]
    return out, out


def _whole_batched(values, offsets, **_):
    return np.asarray(values, dtype=np.float64)


@pytest.fixture
def two_forms():
    """An estimator whose batched form (the adapters') differs from its list form (the collector's)."""
    from rllm_verl.registration import register_estimators_into_verl

    spec = AdvEstimatorSpec("conformance_two_forms", fn=_half_list, batched=_whole_batched)
    manager.add_user_estimator(manager.Estimator(spec, manager.Provider("tests", kind="user")))
    register_estimators_into_verl()
    yield spec.name
    manager.remove_user_estimator(spec.name)


@pytest.mark.parametrize("path", ["verl_legacy", "verl_v1", "trl_outcome"])
def test_an_adapter_path_that_disagrees_with_the_collector_fails_its_cell(adapter_paths, two_forms, path):
    relation = next(r for r in RELATIONS if r.name == "equals_collector")
    cell = run_cell(entry_of(two_forms), adapter_paths[path], relation, FAST)
    assert cell.status == "FAIL" and "expected" in cell.message


# ``rllm-plugins check NAME --paths`` (every installed path, verl's v1 too) on the deliberately wrong plugins of
# tests/conformance/wrong_plugins.py: each exits 1 naming a failing cell of the relation of its mistake. All of them take
# minutes (v1 goes through TransferQueue): the fast sample checks one, ``make conformance`` every one;
# tests/conformance/test_wrong_plugins.py runs them all on the core's paths in every run.

_spec = importlib.util.spec_from_file_location("wrong_plugins", Path(__file__).resolve().parents[2] / "tests" / "conformance" / "wrong_plugins.py")
wrong_plugins = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wrong_plugins)
WRONG = wrong_plugins.WRONG
WRONG_FAST_SAMPLE = ("wrong_raises",)  # the vacuous "both refuse" of before, on every path


@pytest.mark.parametrize("name", sorted(WRONG) if FULL_MATRIX else WRONG_FAST_SAMPLE)
def test_check_paths_fails_every_wrong_plugin(adapter_paths, name, capsys):
    from rllm_plugins import cli

    manager.add_user_estimator(manager.Estimator(WRONG[name][0], manager.Provider("wrong-plugins", kind="user")))
    try:
        code = cli.main(["check", name, "--paths"])
    finally:
        manager.remove_user_estimator(name)
    out = capsys.readouterr().out
    assert code == 1, out
    failing = {line.split(" x ")[1].split(":")[0] for line in out.splitlines() if line.startswith("FAIL: ")}
    assert set(WRONG[name][1]) <= failing, out


@pytest.mark.parametrize("path", ["verl_legacy", "verl_step_bridge", "verl_v1", "trl_outcome", "trl_turn"])
def test_a_path_that_drops_the_transforms_fails_its_twins_cell(adapter_paths, path):
    """A twin is no copy of its path: a framework that ignored the transforms it was given fails equals_collector."""
    base = adapter_paths[path]
    dropping = dataclasses.replace(base, run=lambda call, sample, state: base.run(dataclasses.replace(call, transforms=()), sample, state))
    entry = entry_of("grpo" if "outcome" in base.levels else "step_reinforce")
    relation = next(r for r in RELATIONS if r.name == "equals_collector")
    cell = run_cell(entry, transformed_twin(dropping), relation, FAST)
    assert cell.status == "FAIL" and "expected" in cell.message, cell
    assert run_cell(entry, adapter_paths[f"{path}+transforms"], relation, FAST).status == "PASS"


# verl's own estimators with transforms, on the legacy and the v1 path


VERL_OWN = sorted(name for name in ADV_ESTIMATOR_REGISTRY if not name.startswith("rllm_"))
MUST_RUN = {"grpo", "rloo", "reinforce_plus_plus", "gae"}  # the common ones, whatever verl adds
SEED = 3
SAMPLE = generate(SEED, "step", [size for size in GROUP_SIZES if size >= 2], binary=True)  # 0/1 rewards: grpo_passk's too


def clipped_and_scaled(advantages: np.ndarray) -> np.ndarray:
    """The matrix's TRANSFORMS, written plainly: clip to [-0.5, 0.5], then halve the negative values."""
    assert TRANSFORMS == (("clip", {"min": -0.5, "max": 0.5}), ("scale", {"negative": 0.5}))
    out = np.clip(advantages, -0.5, 0.5)
    return np.where(out < 0, out * 0.5, out)


def legacy(name: str, transforms: bool) -> tuple[np.ndarray, np.ndarray]:
    call = Call(name, {}, TRANSFORMS if transforms else ())
    out, _ = verl_compute(SAMPLE, call, name, values=True)
    return out.batch["advantages"].double().numpy(), out.batch["response_mask"].double().numpy()


def runs_on_the_batch(name: str) -> bool:
    try:
        legacy(name, transforms=False)
    except Exception:
        return False
    return True


RUNS = [name for name in VERL_OWN if runs_on_the_batch(name)]


def test_verls_common_estimators_run_and_the_others_are_named():
    assert set(RUNS) >= MUST_RUN, f"verl's own estimators that ran: {RUNS}"
    print("not run on the matrix's batch:", sorted(set(VERL_OWN) - set(RUNS)))


@pytest.mark.parametrize("name", RUNS)
def test_legacy_transforms_verls_own_advantages(name):
    plain, mask = legacy(name, transforms=False)
    got, _ = legacy(name, transforms=True)
    assert mask.sum() > 0 and not np.array_equal(clipped_and_scaled(plain) * mask, plain * mask), "the transforms change something here"
    np.testing.assert_allclose(got, clipped_and_scaled(plain) * mask, rtol=1e-6, atol=1e-7)


def v1(name: str, transforms: bool) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Each output's advantages and response mask, keyed by its key without the call's prefix (``task0003_12_0``)."""
    by_key, _, masks = v1_compute(SAMPLE, Call(name, {}, TRANSFORMS if transforms else ()), name, critic=name == "gae")
    assert set(masks) == set(by_key["advantages"])

    def plain(key: str) -> str:
        return key[key.index("task") :]

    return {plain(k): v for k, v in by_key["advantages"].items()}, {plain(k): np.asarray(m, dtype=np.float64) for k, m in masks.items()}


@pytest.mark.parametrize("name", [n for n in RUNS if n in MUST_RUN])
def test_v1_transforms_verls_own_advantages(adapter_paths, name):
    plain, masks = v1(name, transforms=False)
    got, _ = v1(name, transforms=True)
    assert set(got) == set(plain)
    for key, mask in masks.items():
        np.testing.assert_allclose(got[key], clipped_and_scaled(plain[key]) * mask, rtol=1e-6, atol=1e-7, err_msg=key)
