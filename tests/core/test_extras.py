"""Without an extra's packages, importing what needs them raises an ImportError that names the extra to install.

Each case runs in a fresh interpreter where the framework is blocked (``sys.modules[name] = None``,
Python's own way to make an import fail), as if it were not installed.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.util import find_spec

import pytest

from rllm_plugins.extras import missing_modules, require_extra


def import_without(blocked: str, statement: str) -> subprocess.CompletedProcess[str]:
    code = f"import sys; sys.modules[{blocked!r}] = None\n{statement}"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)


VERL, TRL = 'pip install "rllm-plugins[verl]"', 'pip install "rllm-plugins[trl]"'


def listed(names: list[str]) -> str:
    """English: ``a``, ``a and b``, ``a, b and c`` (written out here, independently of the module under test)."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


@pytest.mark.parametrize(
    ("blocked", "module", "needs", "install"),
    [
        ("verl", "rllm_verl", ["verl", "torch"], VERL),
        ("torch", "rllm_verl", ["verl", "torch"], VERL),
        ("trl", "rllm_trl", ["trl", "torch"], TRL),
        ("transformers", "rllm_plugins.tiny", ["torch", "transformers", "tokenizers"], f"{TRL} or {VERL}"),
    ],
)
def test_importing_an_adapter_without_its_extra_names_the_extra(blocked, module, needs, install):
    """The message names the blocked module and every other one this environment lacks (the core cells of make compat lack verl)."""
    missing = [name for name in needs if name == blocked or find_spec(name) is None]
    done = import_without(blocked, f"import {module}")
    assert done.returncode == 1
    verb = "is" if len(missing) == 1 else "are"
    message = f"{module} needs {listed(needs)}, and {listed(missing)} {verb} not installed. Install: {install}"
    assert done.stderr.splitlines()[-1] == f"ModuleNotFoundError: {message}"


def test_the_tiny_model_needs_neither_trl_nor_verl():
    pytest.importorskip("transformers")
    code = "import sys; sys.modules['trl'] = sys.modules['verl'] = None\nfrom rllm_plugins.tiny import build_tiny_model, build_tiny_tokenizer\n"
    code += "model = build_tiny_model(build_tiny_tokenizer(['1+1=2', 'hello'])); print(sum(p.numel() for p in model.parameters()))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert 20_000 < int(done.stdout) < 40_000


def test_missing_modules_looks_up_without_importing():
    assert missing_modules(["json", "rllm_no_such_module"]) == ["rllm_no_such_module"]
    assert "rllm_no_such_module" not in sys.modules
    with pytest.raises(ModuleNotFoundError) as caught:
        require_extra("thing", "verl", ["rllm_no_such_module"])
    assert caught.value.name == "rllm_no_such_module"
