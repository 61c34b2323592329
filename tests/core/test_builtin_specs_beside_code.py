"""Each built-in estimator's spec is declared beside its code, as its module's ``SPECS``, and collected from one list.

``rllm_plugins.estimators.BUILTIN_MODULES`` names the modules; ``BUILTIN_SPECS`` is their ``SPECS`` in that
order. A new built-in joins by adding its module name to the list: every estimator module of the folder
must be listed.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from rllm_plugins import estimators
from rllm_plugins.estimators import BUILTIN_MODULES, BUILTIN_SPECS
from rllm_plugins.spec import AdvEstimatorSpec

FOLDER = Path(estimators.__file__).parent
NOT_ESTIMATORS = {"__init__", "builtin", "step_options"}  # the package, the plugin that registers the built-ins, a helper


def module_of(name: str):
    return importlib.import_module(f"rllm_plugins.estimators.{name}")  # the package's attribute of that name is the estimator function


@pytest.mark.parametrize("name", BUILTIN_MODULES)
def test_every_listed_module_declares_its_specs(name):
    specs = getattr(module_of(name), "SPECS", None)
    assert isinstance(specs, tuple) and specs, f"rllm_plugins/estimators/{name}.py declares no SPECS tuple"
    assert all(isinstance(spec, AdvEstimatorSpec) for spec in specs)


def test_the_built_in_specs_are_the_listed_modules_specs_in_list_order():
    declared = [spec for name in BUILTIN_MODULES for spec in module_of(name).SPECS]
    assert len(BUILTIN_SPECS) == len(declared) and all(a is b for a, b in zip(BUILTIN_SPECS, declared, strict=True))


def test_every_estimator_module_of_the_folder_is_listed_once():
    assert len(set(BUILTIN_MODULES)) == len(BUILTIN_MODULES), "a module is listed twice"
    files = {path.stem for path in FOLDER.glob("*.py")} - NOT_ESTIMATORS
    assert files == set(BUILTIN_MODULES), f"unlisted: {sorted(files - set(BUILTIN_MODULES))}; listed without a file: {sorted(set(BUILTIN_MODULES) - files)}"


def test_the_helpers_declare_no_specs():
    assert all(not hasattr(module_of(name), "SPECS") for name in NOT_ESTIMATORS - {"__init__"})


def test_each_spec_is_declared_beside_its_batched_function():
    for name in BUILTIN_MODULES:
        for spec in module_of(name).SPECS:
            assert spec.batched.__module__ == f"rllm_plugins.estimators.{name}", f"{spec.name}'s batched form lives in {spec.batched.__module__}"


def test_every_option_of_a_built_in_is_a_named_parameter():
    assert [spec.name for spec in BUILTIN_SPECS if spec.options != ()] == []
