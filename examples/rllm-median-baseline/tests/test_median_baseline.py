import numpy as np

from rllm_plugins import get_rllm_adv_estimator
from rllm_plugins.testing import assert_estimator_contract


def test_median_baseline_is_selectable_by_name():
    advantages, _ = get_rllm_adv_estimator("median_baseline")(rewards=[np.array([0.0, 1.0, 5.0])])
    np.testing.assert_allclose(advantages[0], [-1.0, 0.0, 4.0])


def test_median_baseline_keeps_the_estimator_contract():
    assert_estimator_contract("median_baseline")
