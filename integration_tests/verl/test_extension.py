"""The guarded extension mechanism on a real module imported through Python's import system."""

from __future__ import annotations

import importlib
import inspect
import logging
import sys

import pytest
from rllm_verl.extension import Extension, extension_status, install

SOURCE = """
def target(data, keys, scale=1.0):
    return ("original", data, keys, scale)
"""


def doubling(original):
    def target(data, keys, scale=1.0):
        return ("extended", *original(data, keys, scale)[1:])

    return target


PARAMETERS = (("data", inspect.Parameter.empty), ("keys", inspect.Parameter.empty), ("scale", 1.0))


@pytest.fixture
def modules(tmp_path, monkeypatch, request):
    """A module ``target`` and a module ``user`` doing ``from target import target``, named after the test (pending extensions stay installed)."""
    target, user = f"rllm_fixture_ext_{request.node.name}", f"rllm_fixture_ext_user_{request.node.name}"
    (tmp_path / f"{target}.py").write_text(SOURCE)
    (tmp_path / f"{user}.py").write_text(f"from {target} import target\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path, target, user
    for name in (target, user):
        sys.modules.pop(name, None)


def extension(modules, name: str, env: str = "RLLM_FIXTURE_EXT", make=doubling) -> Extension:
    _, target, user = modules
    return Extension(name=name, module=target, attribute="target", parameters=PARAMETERS, make=make, env=env, bound_in=(user,))


def test_a_pending_extension_applies_when_the_module_is_imported_and_reaches_from_imports(modules):
    assert install(extension(modules, "lazy")) == f"pending (applied when {modules[1]} is imported)"
    assert modules[1] not in sys.modules
    user = importlib.import_module(modules[2])
    assert user.target(1, 2)[0] == "extended"
    assert extension_status()["lazy"] == "active"


def test_installing_twice_wraps_once(modules):
    target = importlib.import_module(modules[1])
    install(extension(modules, "twice"))
    first = target.target
    install(extension(modules, "twice"))
    assert target.target is first and first(1, 2) == ("extended", 1, 2, 1.0)
    assert first.__wrapped__(1, 2)[0] == "original"


def test_an_imported_module_and_its_bound_names_are_extended_at_once(modules):
    user = importlib.import_module(modules[2])
    install(extension(modules, "now"))
    assert user.target(1, 2)[0] == "extended"
    assert sys.modules[modules[1]].target is user.target


def test_a_reload_is_extended_again(modules):
    install(extension(modules, "reload"))
    target = importlib.import_module(modules[1])
    importlib.reload(target)
    assert target.target(1, 2)[0] == "extended"


def test_another_signature_is_left_alone_with_one_warning(modules, caplog):
    (modules[0] / f"{modules[1]}.py").write_text(SOURCE.replace("scale=1.0", "scale=2.0"))
    target = importlib.import_module(modules[1])
    with caplog.at_level(logging.WARNING, logger="rllm_verl.extension"):
        install(extension(modules, "changed"))
        install(extension(modules, "changed"))
    assert target.target(1, 2)[0] == "original"
    messages = [r.getMessage() for r in caplog.records if r.name == "rllm_verl.extension"]
    assert messages == [
        f"rllm-plugins: changed extension of {modules[1]}.target not applied: its signature is (data, keys, scale=2.0), "
        "this version of rllm-plugins supports (data, keys, scale=1.0); verl's own function is used"
    ]


def test_the_environment_variable_opts_out(modules, monkeypatch):
    monkeypatch.setenv("RLLM_FIXTURE_EXT_OFF", "off")
    target = importlib.import_module(modules[1])
    assert install(extension(modules, "optout", env="RLLM_FIXTURE_EXT_OFF")) == "off (RLLM_FIXTURE_EXT_OFF=off)"
    assert target.target(1, 2)[0] == "original"


def test_a_failing_extension_never_raises(modules, caplog):
    def broken(original):
        raise RuntimeError("boom")

    install(extension(modules, "broken", make=broken))
    with caplog.at_level(logging.WARNING, logger="rllm_verl.extension"):
        target = importlib.import_module(modules[1])
    assert target.target(1, 2)[0] == "original"
    assert extension_status()["broken"] == "not applied: RuntimeError: boom"
    assert any("RuntimeError: boom" in r.getMessage() for r in caplog.records)
