"""verl's next release: where ``compute_advantage`` is defined, every module that imports it, and #7473's extra arguments.

verl PR #7237 moves ``compute_advantage`` into ``verl/trainer/ppo/trainer_utils.py`` (``ray_trainer`` re-imports it);
verl PR #7473 passes ``non_tensor_batch`` and ``batch`` to every estimator whose signature accepts them (``**kwargs``).
These tests read the installed verl's own source: on any release, the function is defined in one of
:data:`rllm_verl.versions.ADVANTAGE_MODULES`, every module that imports it by name imports it from there, and after
``import verl`` each of them holds the extension (``reward_keys``), whatever the order of imports. A layout they do not
expect fails here, naming the module to add to the seam. The ``next-verl-*`` cells (``make compat-next``) run them on
verl main and on verl main with #7237 merged; the other verl cells and the development environment run them too.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
import verl
from rllm_verl.context import LEGACY_EXTENSION
from rllm_verl.extension import extension_status, install, where_defined
from rllm_verl.patches.legacy import REWARD_KEYS
from rllm_verl.versions import ADVANTAGE_MODULES, installed_verl_version
from verl import DataProto
from verl.trainer.ppo import core_algos

NAME = "compute_advantage"
VERL_ROOT = Path(verl.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(VERL_ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layout() -> tuple[list[str], dict[str, str]]:
    """From the installed verl's source: the modules defining ``compute_advantage`` at top level, and each module that
    imports it by name -> the module it imports it from."""
    defining, importing = [], {}
    for path in sorted(VERL_ROOT.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if NAME not in text:
            continue
        tree = ast.parse(text)
        name = _module_name(path)
        if any(isinstance(node, ast.FunctionDef) and node.name == NAME for node in tree.body):
            defining.append(name)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and any(alias.name == NAME and alias.asname in (None, NAME) for alias in node.names):
                importing[name] = node.module
    return defining, importing


DEFINING, IMPORTING = _layout()


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except Exception:  # a module of an optional backend (GPU-only dependencies): the others still prove the layout
        return False
    return True


def test_verl_defines_compute_advantage_in_exactly_one_module_the_seam_names():
    version = installed_verl_version()
    assert len(DEFINING) == 1, f"verl {version} defines {NAME} in {DEFINING or 'no module'}; the seam expects exactly one"
    assert DEFINING[0] in ADVANTAGE_MODULES, (
        f"verl {version} defines {NAME} in {DEFINING[0]}, which rllm_verl.versions.ADVANTAGE_MODULES {ADVANTAGE_MODULES} does not name: "
        "add it there, or the reward_keys extension misses the processes that import it from there"
    )


def test_every_module_that_imports_it_by_name_imports_it_from_a_module_the_seam_names():
    assert "verl.trainer.ppo.v1.utils" in IMPORTING or "verl.trainer.ppo.v1.utils" in DEFINING or not (VERL_ROOT / "trainer/ppo/v1").exists()
    strays = {module: source for module, source in IMPORTING.items() if source not in ADVANTAGE_MODULES}
    assert strays == {}, f"verl {installed_verl_version()}: these modules import {NAME} from modules the seam does not watch: {strays}"


def test_the_definition_and_every_importer_hold_the_extension_after_import_verl():
    imported = [name for name in [*DEFINING, *IMPORTING] if _importable(name)]
    assert set(ADVANTAGE_MODULES) & set(imported), f"none of {ADVANTAGE_MODULES} imports on this machine"
    assert extension_status()[LEGACY_EXTENSION] == "active"
    functions = {name: getattr(sys.modules[name], NAME) for name in imported}
    missing = [name for name, fn in functions.items() if getattr(fn, "rllm_extension", None) != LEGACY_EXTENSION]
    assert missing == [], f"verl {installed_verl_version()}: {missing} hold verl's own {NAME}, not the extension"
    assert len({id(fn) for fn in functions.values()}) == 1, "the modules hold different replacements: the extension was applied twice"
    assert where_defined(REWARD_KEYS) == DEFINING[0]
    assert functions[imported[0]].__wrapped__ is sys.modules[DEFINING[0]].__dict__[NAME].__wrapped__


def test_installing_again_changes_nothing():
    importlib.import_module(DEFINING[0])
    before = {name: getattr(sys.modules[name], NAME) for name in [*DEFINING, *IMPORTING] if name in sys.modules}
    assert install(REWARD_KEYS) == "active"
    after = {name: getattr(sys.modules[name], NAME) for name in before}
    assert after == before
    assert not hasattr(next(iter(after.values())).__wrapped__, "rllm_extension")  # verl's own function under one wrapper


def test_the_seam_checks_the_signature_of_the_function_where_it_is_defined():
    original = getattr(sys.modules[DEFINING[0]], NAME).__wrapped__
    assert original.__module__ == DEFINING[0]
    found = tuple((p.name, p.default) for p in inspect.signature(original).parameters.values())
    assert found == REWARD_KEYS.parameters, f"verl {installed_verl_version()}'s {NAME}{inspect.signature(original)}: update the extension's parameters"


ORDER_SCRIPT = """
import importlib, json, sys
import verl  # loads rllm-plugins' entry point, as verl does in every process
out = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception:
        continue
for name in sys.argv[1:]:
    if name in sys.modules:
        out[name] = getattr(getattr(sys.modules[name], "compute_advantage", None), "rllm_extension", None)
print(json.dumps(out))
"""


def _orders() -> list[list[str]]:
    """Import orders of a fresh process: the definition first, each importer first (v1's own utils without ray_trainer)."""
    names = list(dict.fromkeys([*DEFINING, *IMPORTING]))
    return [[first, *(n for n in names if n != first)] for first in names]


@pytest.mark.parametrize("order", _orders(), ids=lambda order: order[0])
def test_a_fresh_process_extends_every_importer_whatever_it_imports_first(order):
    done = subprocess.run([sys.executable, "-c", ORDER_SCRIPT, *order], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert order[0] in seen, f"{order[0]} does not import in a fresh process: {done.stderr[-1000:]}"
    assert {name: ext for name, ext in seen.items() if ext != LEGACY_EXTENSION} == {}, f"imported in the order {order}"


# verl PR #7473: compute_advantage passes non_tensor_batch and batch to an estimator whose signature accepts them


def _accepts(fn, name: str) -> bool:
    """#7473's rule: ``fn`` declares ``name`` or takes ``**kwargs``."""
    parameters = inspect.signature(fn).parameters
    return name in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def _batch() -> DataProto:
    rewards = torch.zeros(6, 4)
    rewards[[0, 2, 3], 3] = 1.0
    rewards[4, 1] = 0.5
    mask = torch.ones(6, 4, dtype=torch.int64)
    mask[1, 2:] = 0
    uids = np.array(["a", "a", "a", "b", "b", "b"], dtype=object)
    return DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask, "responses": torch.arange(24).reshape(6, 4)},
        non_tensors={"uid": uids, "task": np.array(["t"] * 6, dtype=object)},
    )


@pytest.mark.parametrize("name", ["rllm_grpo", "rllm_rloo", "rllm_gigpo"])
def test_each_rllm_estimator_declares_what_7473_passes_it(name):
    fn = core_algos.get_adv_estimator_fn(name)
    assert _accepts(fn, "non_tensor_batch") and _accepts(fn, "batch"), f"{name}: its signature no longer takes what #7473 passes"


@pytest.mark.parametrize("name", ["rllm_grpo", "rllm_rloo"])
def test_an_outcome_estimator_called_with_7473s_arguments_computes_what_it_computes_without_them(name):
    fn = core_algos.get_adv_estimator_fn(name)
    data = _batch()
    common = {"token_level_rewards": data.batch["token_level_rewards"], "response_mask": data.batch["response_mask"], "index": data.non_tensor_batch["uid"]}
    plain = fn(**common, config=None)
    given = fn(**common, config=None, non_tensor_batch=data.non_tensor_batch, batch=data.batch)
    for a, b in zip(plain, given, strict=True):
        torch.testing.assert_close(a, b)


def _verl_passes_the_batch() -> bool:
    """Whether the installed verl's compute_advantage passes ``non_tensor_batch`` to any estimator that accepts it (#7473)."""
    source = inspect.getsource(sys.modules[DEFINING[0]])
    return '"non_tensor_batch", data.non_tensor_batch' in source or "_accepts_kwarg" in source


@pytest.mark.parametrize("name", ["rllm_rloo", "rllm_gigpo"])
def test_through_verls_own_compute_advantage_the_rllm_estimator_gets_the_batch_verl_gives_it(monkeypatch, name):
    """On a verl with #7473, verl's own call hands our estimator the DataProto's ``non_tensor_batch`` (and ``batch``); before
    it, the extension shows the same object during the call. Either way an outcome estimator computes what a direct call does,
    and a step-level one finds ``responses``."""
    from rllm_verl.compute import outcome

    seen = []
    real = outcome.compute_rllm_advantage

    def spy(estimator, token_level_rewards, response_mask, index, config, non_tensor_batch, *rest):
        seen.append(non_tensor_batch)
        return real(estimator, token_level_rewards, response_mask, index, config, non_tensor_batch, *rest)

    monkeypatch.setattr(outcome, "compute_rllm_advantage", spy)
    data = _batch()
    compute_advantage = getattr(sys.modules[DEFINING[0]], NAME)
    out = compute_advantage(data, adv_estimator=name, config=None)
    assert (seen[-1] is data.non_tensor_batch) is _verl_passes_the_batch()
    assert torch.isfinite(out.batch["advantages"]).all()
    if name == "rllm_rloo":
        fn = core_algos.get_adv_estimator_fn(name)
        expected, _ = fn(token_level_rewards=data.batch["token_level_rewards"], response_mask=data.batch["response_mask"], index=data.non_tensor_batch["uid"])
        torch.testing.assert_close(out.batch["advantages"], expected)


# the cap: NEWEST_TESTED stays until a cell proves the next release; verl-check names a newer verl as untested


def test_a_verl_newer_than_the_matrix_tested_is_untested_and_the_cap_is_the_next_minor():
    from rllm_verl.versions import NEWEST_TESTED, features_of

    newest = ".".join(map(str, NEWEST_TESTED))
    assert features_of(newest).untested is None
    following = f"{NEWEST_TESTED[0]}.{NEWEST_TESTED[1] + 1}.0.dev0"
    assert newest in str(features_of(following).untested) and following in str(features_of(following).untested)


def test_verl_check_names_an_untested_newer_verl_first(monkeypatch):
    from rllm_verl import versions
    from rllm_verl.tools import check

    faked = versions.features_of("0.10.0.dev0")
    monkeypatch.setattr(versions, "verl_features", lambda: faked)
    report = check.verl_check(["algorithm.adv_estimator=rllm_grpo"])
    assert report.ok, report.errors
    assert report.untested == faked.untested and report.as_dict()["untested"] == faked.untested
    assert f"  untested verl: {faked.untested}" in str(report).splitlines()
    monkeypatch.setattr(versions, "verl_features", lambda: versions.features_of(".".join(map(str, versions.NEWEST_TESTED))))
    tested = check.verl_check(["algorithm.adv_estimator=rllm_grpo"])
    assert tested.untested is None and not any(line.startswith("  untested verl") for line in str(tested).splitlines())
