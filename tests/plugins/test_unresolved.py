"""The conflict wording both lookups share (estimators: real fixture plugins in ``test_discovery.py``; transforms use the same function)."""

from __future__ import annotations

import pytest

from rllm_plugins.discovery import manager
from rllm_plugins.discovery.unresolved import conflict_message, near_typo_hint
from rllm_plugins.spec import Provider
from rllm_plugins.transforms import UnknownTransformError, get_transform


def test_a_name_offered_twice_names_both_providers_and_the_entry_points_to_disable() -> None:
    providers = [Provider("fixture_a", "rllm-a", "1.0"), Provider("fixture_b", "rllm-b", "2.0")]
    assert conflict_message("advantage transform", "recentre", providers) == (
        "advantage transform 'recentre' is offered by 2 installed plugins: plugin 'fixture_a' (distribution rllm-a 1.0); "
        "plugin 'fixture_b' (distribution rllm-b 2.0). Uninstall one, or disable one with RLLM_PLUGINS_DISABLE=<entry-point name> "
        "(one of: fixture_a,fixture_b)."
    )


def test_the_transform_lookup_raises_that_wording_for_a_conflict(monkeypatch: pytest.MonkeyPatch) -> None:
    """The discovered state is given a second provider of one name (two installed transform plugins stand behind it)."""
    providers = [Provider("fixture_a", "rllm-a", "1.0"), Provider("fixture_b", "rllm-b", "2.0")]
    monkeypatch.setitem(manager.plugin_state().transform_conflicts, "recentre_twice", providers)
    with pytest.raises(UnknownTransformError) as caught:
        get_transform("recentre_twice")
    assert str(caught.value) == conflict_message("advantage transform", "recentre_twice", providers)


def test_a_typo_hint_is_the_closest_name_and_only_a_near_typo_once_narrowed() -> None:
    """One rule for the estimator and transform lookups and verl-check: 'sclae' is a typo of 'scale', not a near one."""
    names = ["clip", "scale", "kl_shaping"]
    assert near_typo_hint("sclae", names, narrowed=False) == " Did you mean 'scale'?"
    assert near_typo_hint("sclae", names, narrowed=True) == ""
    assert near_typo_hint("scalee", names, narrowed=True) == " Did you mean 'scale'?"
    assert near_typo_hint("entropy", names, narrowed=False) == ""
