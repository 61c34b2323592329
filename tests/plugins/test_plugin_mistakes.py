"""Plugin authors' and users' mistakes that used to pass in silence: each says what is wrong and where.

The distributions are real installed ones for ``importlib.metadata``: a ``*.dist-info`` folder
with ``METADATA`` and ``entry_points.txt`` (the files pip writes) next to the module, in a
folder put on ``sys.path``.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rllm_plugins.discovery.manager import DISABLE_ENV, STRICT_ENV, plugin_state, reset_plugins
from rllm_plugins.registry import UnknownEstimatorError, get_estimator

TYPO_HOOK = """from rllm_plugins import AdvEstimatorSpec, hookimpl


def centred(rewards, **kwargs):
    return rewards, rewards


@hookimpl
def rllm_adv_estimator():
    return [AdvEstimatorSpec("typo_centred", fn=centred)]
"""

NOT_A_SPEC = """from rllm_plugins import hookimpl


@hookimpl
def rllm_adv_estimators():
    yield "not_a_spec"
"""

EMPTY_ON_PURPOSE = """from rllm_plugins import hookimpl


@hookimpl
def rllm_adv_estimators():
    return []
"""


def install(site: Path, name: str, source: str) -> Path:
    """A distribution ``rllm-mistake-<name>`` 0.1 with the entry point ``<name> = rllm_mistake_<name>``; returns the module file."""
    module = f"rllm_mistake_{name}"
    (site / f"{module}.py").write_text(source)
    info = site / f"rllm_mistake_{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: rllm-mistake-{name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[rllm_plugins]\n{name} = {module}\n")
    return site / f"{module}.py"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(STRICT_ENV, raising=False)
    monkeypatch.delenv(DISABLE_ENV, raising=False)
    yield tmp_path
    reset_plugins()
    for module in [m for m in sys.modules if m.startswith("rllm_mistake_")]:
        del sys.modules[module]


@pytest.fixture
def load(monkeypatch: pytest.MonkeyPatch) -> Callable[..., list[str]]:
    def run(**env: str) -> list[str]:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        reset_plugins()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            plugin_state()
        return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]

    return run


def record(name: str):
    return next(r for r in plugin_state().records if r.name == name)


def test_a_misspelled_hook_is_a_load_error_naming_it_where_it_is_defined(site, load):
    """Before: the plugin showed as active with no estimators, and its names were merely unknown."""
    path = install(site, "typo", TYPO_HOOK)
    load()
    why = (
        "TypeError: 'rllm_mistake_typo' offers no estimators: it has no @hookimpl rllm_adv_estimators() and registers none with "
        f"@register_rllm_adv_estimator; its @hookimpl rllm_adv_estimator (at {path}:8) is no rllm-plugins hook: the hook is rllm_adv_estimators"
    )
    assert (record("typo").status, record("typo").error) == ("error", why)
    with pytest.raises(UnknownEstimatorError) as caught:
        get_estimator("typo")
    assert str(caught.value) == (
        f"estimator 'typo' is not available: plugin 'typo' (distribution rllm-mistake-typo 0.1) failed to load: {why}. "
        "Fix or uninstall it (`rllm-plugins plugins` shows every plugin's status)."
    )


def test_a_hook_that_returns_no_estimators_on_purpose_stays_active(site, load):
    install(site, "empty", EMPTY_ON_PURPOSE)
    assert load() == []
    assert (record("empty").status, record("empty").estimators) == ("active", [])


def test_a_yield_that_is_no_spec_names_the_hook_file_and_line(site, load):
    path = install(site, "nospec", NOT_A_SPEC)
    load()
    assert record("nospec").error == f"TypeError: rllm_adv_estimators() must yield AdvEstimatorSpec objects, got str: 'not_a_spec' (from {path}:4)"


def test_a_disable_name_that_matches_no_plugin_says_so(site, load):
    """Before: RLLM_PLUGINS_DISABLE=EMPTY or a typo disabled nothing, in silence."""
    install(site, "empty", EMPTY_ON_PURPOSE)
    caught = load(RLLM_PLUGINS_DISABLE=" EMPTY , nothing_like_it")
    assert record("empty").status == "active"
    installed = ", ".join(r.name for r in plugin_state().records if r.name != "builtin")
    assert [w for w in caught if DISABLE_ENV in w] == [
        f"rllm_plugins: RLLM_PLUGINS_DISABLE names 'EMPTY', which is no installed plugin's entry-point name, so it disables nothing. "
        f"Did you mean 'empty'? Installed: {installed}",
        f"rllm_plugins: RLLM_PLUGINS_DISABLE names 'nothing_like_it', which is no installed plugin's entry-point name, so it disables nothing. "
        f"Installed: {installed}",
    ]
    assert [w for w in load(RLLM_PLUGINS_DISABLE="empty") if DISABLE_ENV in w] == []
    assert record("empty").status == "disabled"


OFFERS_ANOTHER_NAME = """from rllm_plugins import AdvEstimatorSpec, hookimpl


def centred(rewards, **kwargs):
    return rewards, rewards


@hookimpl
def rllm_adv_estimators():
    return [AdvEstimatorSpec("other_name", fn=centred)]
"""


def test_the_name_of_a_plugin_that_loaded_says_what_it_offers_not_that_it_failed(site, load):
    """Before, with another plugin broken: "estimator 'named' is not available: Plugins that did not load ..." for a plugin that loaded."""
    install(site, "named", OFFERS_ANOTHER_NAME)
    broken = install(site, "broken", "import rllm_mistake_not_installed\n")
    load()
    with pytest.raises(UnknownEstimatorError) as caught:
        get_estimator("named")
    assert str(caught.value).startswith(
        "Unknown advantage estimator 'named'. Plugins that did not load, which may offer it: plugin 'broken' (distribution "
        f"rllm-mistake-broken 0.1) failed to load: ModuleNotFoundError: No module named 'rllm_mistake_not_installed' (at {broken}:1). "
        "plugin 'named' (distribution rllm-mistake-named 0.1) is installed and offers: other_name. Available: "
    )


OFFERS_A_NAME_TWICE = """from rllm_plugins import AdvEstimatorSpec, hookimpl


def centred(rewards, **kwargs):
    return rewards, rewards


def doubled(rewards, **kwargs):
    return [2 * r for r in rewards], rewards


@hookimpl
def rllm_adv_estimators():
    return [AdvEstimatorSpec("twice", fn=centred), AdvEstimatorSpec("twice_too", fn=doubled, aliases=("twice",))]
"""


def test_a_plugin_offering_one_name_twice_is_a_load_error_not_a_silent_first_wins(site, load):
    """Before: the first spec won in silence."""
    install(site, "twice", OFFERS_A_NAME_TWICE)
    caught = load()
    why = (
        "ValueError: 'rllm_mistake_twice' offers the estimator name 'twice' twice (estimators 'twice' and 'twice_too'); "
        "give each estimator its own name and aliases"
    )
    assert (record("twice").status, record("twice").error) == ("error", why)
    assert any(why in w for w in caught)
    with pytest.raises(UnknownEstimatorError, match="failed to load"):
        get_estimator("twice")


def test_a_spec_whose_alias_is_its_own_name_is_a_value_error():
    from rllm_plugins import AdvEstimatorSpec

    with pytest.raises(ValueError) as caught:
        AdvEstimatorSpec("selfish", fn=lambda rewards, **kwargs: (rewards, rewards), aliases=("other", "SELFISH"))
    assert str(caught.value) == "estimator 'selfish': name and aliases must all differ, but 'selfish' is given twice (aliases ('other', 'selfish'))"
