"""Plugins through the registry: a list form whose options are known refuses others; an open one (``**kwargs``, no declared options) takes any."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rllm_plugins import AdvEstimatorSpec, get_rllm_adv_estimator
from rllm_plugins.discovery.manager import Estimator, Provider

STEP_INPUTS = ([np.array([1.0, 0.0])], [[np.array([0.0, 1.0]), np.array([0.0])]])


def test_an_installed_step_plugin_with_declared_options_refuses_an_unknown_one(load_plugins):
    load_plugins()
    fn = get_rllm_adv_estimator("last_turn_baseline")
    assert [a.tolist() for a in fn(*STEP_INPUTS)[0][0]] == [[0.0, 0.5], [-0.5]]
    with pytest.raises(ValueError, match=r"unknown option 'gamma'"):
        fn(*STEP_INPUTS, gamma=0.9)


def test_an_installed_open_plugin_still_takes_any_keyword(load_plugins):
    load_plugins()
    advantages, _ = get_rllm_adv_estimator("scaled_baseline")([np.array([1.0, 0.0])], anything=1)
    assert advantages[0].tolist() == [1.0, -1.0]


def centred(rewards: list[np.ndarray], *, scale: float = 1.0, **kwargs: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    out = [scale * (np.asarray(r, dtype=np.float64) - np.mean(r)) for r in rewards]
    return out, out


def test_a_plugins_own_list_form_with_declared_options_refuses_others_naming_the_closest():
    estimator = Estimator(AdvEstimatorSpec("centred", fn=centred, options=("shift",)), Provider("fixture", "fixture-dist", "1.0"))
    assert estimator.list_form([np.array([1.0, 0.0])], scale=2.0, shift=0.0, episilon=1e-6)[0][0].tolist() == [1.0, -1.0]
    with pytest.raises(ValueError, match=r"centred\(\): unknown option 'scael'; its options: .*scale, shift\. Did you mean 'scale'\?"):
        estimator.list_form([np.array([1.0, 0.0])], scael=2.0)


def test_a_plugin_that_declares_no_options_is_open():
    estimator = Estimator(AdvEstimatorSpec("centred", fn=centred), Provider("fixture", "fixture-dist", "1.0"))
    assert estimator.list_form([np.array([1.0, 0.0])], meant_for_someone_else=1)[0][0].tolist() == [0.5, -0.5]
