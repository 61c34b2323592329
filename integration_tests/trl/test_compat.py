"""The private TRL methods the mixin overrides, and the pinned TRL range."""

from __future__ import annotations

from importlib.metadata import requires

import pytest
import trl
from packaging.requirements import Requirement
from rllm_trl import check_trl_compatibility
from trl import GRPOTrainer


def test_installed_trl_has_the_signatures_the_mixin_overrides():
    check_trl_compatibility(GRPOTrainer)  # raises RuntimeError naming the method if TRL changed it


def test_a_changed_signature_fails_loudly():
    class Changed(GRPOTrainer):
        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list, extra):
            raise NotImplementedError

    with pytest.raises(RuntimeError, match=r"Changed\._calculate_rewards takes .* but TRL .* has"):
        check_trl_compatibility(Changed)


def test_installed_trl_is_in_the_pinned_range():
    pins = [r for r in map(Requirement, requires("rllm-plugins") or []) if r.name == "trl"]
    assert pins, "the [trl] extra pins no TRL range"
    assert all(pin.specifier.contains(trl.__version__) for pin in pins), f"TRL {trl.__version__} is outside {[str(p.specifier) for p in pins]}"
