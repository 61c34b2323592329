"""Concurrency: threads resolving estimator names while the plugins load for the first time."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from rllm_plugins import available_estimators, get_rllm_adv_estimator
from rllm_plugins.discovery import manager as plugins
from rllm_plugins.registry import get_estimator

THREADS = 8
NAMES = ["grpo", "rloo", "median_baseline", "opo"]


@pytest.fixture
def slow_first_load(monkeypatch):
    """Forget the loaded plugins and make the next load slow, so every thread arrives while it runs."""
    build = plugins._build

    def slow_build():
        time.sleep(0.05)
        return build()

    plugins.reset_plugins()
    monkeypatch.setattr(plugins, "_build", slow_build)
    yield
    plugins.reset_plugins()


def resolve_everything(barrier: threading.Barrier):
    barrier.wait()
    state = plugins.plugin_state()
    estimators = {name: get_estimator(name) for name in NAMES}
    advantages, _ = get_rllm_adv_estimator("median_baseline")(rewards=[np.array([0.0, 1.0, 5.0])])
    return state, estimators, available_estimators(), advantages[0]


@pytest.mark.parametrize("round_", range(5))
def test_threads_resolving_names_during_the_first_load_see_one_registry(slow_first_load, round_):
    barrier = threading.Barrier(THREADS)
    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(lambda _: resolve_everything(barrier), range(THREADS)))

    first_state, first_estimators, first_names, _ = results[0]
    for state, estimators, names, advantages in results:
        assert state is first_state  # built once
        assert all(estimators[n] is first_estimators[n] for n in NAMES)
        assert names == first_names and set(NAMES) <= set(names)
        np.testing.assert_allclose(advantages, [-1.0, 0.0, 4.0])
    assert plugins.plugin_state() is first_state
