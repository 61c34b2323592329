"""Modules that moved keep their old import paths: the old name gives the very module of the new one, with a DeprecationWarning."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
import rllm_trl
import rllm_verl

CASES = [("rllm_verl", old, new) for old, new in rllm_verl.OLD_PATHS.items()] + [("rllm_trl", old, new) for old, new in rllm_trl.OLD_PATHS.items()]


@pytest.mark.parametrize(("package", "old", "new"), CASES, ids=[f"{p}.{o}" for p, o, _ in CASES])
def test_an_old_path_gives_the_module_of_the_new_path(package, old, new):
    sys.modules.pop(f"{package}.{old}", None)
    with pytest.warns(DeprecationWarning, match=rf"{package}\.{old} moved to {package}\.{new}; import it from there"):
        module = importlib.import_module(f"{package}.{old}")
    assert module is importlib.import_module(f"{package}.{new}")
    assert module.__name__ == f"{package}.{new}"  # the real module keeps its own name and spec


def test_from_import_of_an_old_name_and_of_a_name_inside_it():
    code = (
        "import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
        "try:\n    from rllm_verl.check import verl_check\nexcept DeprecationWarning as w:\n    print('warned:', w)\n"
        "warnings.simplefilter('ignore')\n"
        "from rllm_verl.check import verl_check\nfrom rllm_verl.tools.check import verl_check as new\nprint(verl_check is new)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True).stdout
    assert out.splitlines() == ["warned: rllm_verl.check moved to rllm_verl.tools.check; import it from there", "True"]


def test_an_unknown_old_name_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("rllm_verl.no_such_module")
