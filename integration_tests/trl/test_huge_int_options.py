"""``RLLMGRPOConfig``: every option of every built-in estimator given ``10**400`` is a ``ValueError`` naming it, at construction.

Generated from the options themselves; before, the float options raised a raw ``OverflowError``.
"""

from __future__ import annotations

import numbers

import pytest
from rllm_trl import RLLMGRPOConfig

from rllm_plugins.estimators.builtin import rllm_adv_estimators
from rllm_plugins.options import spec_options
from rllm_plugins.registry import get_estimator_spec

BASE = {"output_dir": "unused", "use_cpu": True, "bf16": False}
# TRL refuses a value-based estimator whatever its options (GRPOTrainer has no critic: test_config.py)
CASES = [(spec.name, option) for spec in rllm_adv_estimators() if not spec.needs_values for option in spec_options(get_estimator_spec(spec.name)).defaults]


def float_default(name: str, option: str) -> bool:
    default = spec_options(get_estimator_spec(name)).defaults[option]
    return isinstance(default, numbers.Real) and not isinstance(default, (bool, numbers.Integral))


@pytest.mark.parametrize(("name", "option"), CASES)
def test_a_huge_int_option_is_refused_at_construction_naming_it(name, option):
    try:
        RLLMGRPOConfig(**BASE, adv_estimator=name, adv_estimator_kwargs={option: 10**400})
    except ValueError as error:
        assert option in str(error), str(error)
        return
    assert not float_default(name, option), f"{name}: {option}=10**400 accepted"


def test_a_huge_composite_weight_is_refused_at_construction():
    with pytest.raises(ValueError, match=r"term 0 \('grpo'\): the weight must be a finite number, got int 10+\.\.\. \(401 characters\)"):
        RLLMGRPOConfig(**BASE, adv_estimator="composite", adv_estimator_kwargs={"terms": [["grpo", 10**400]]})
