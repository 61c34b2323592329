"""Plugin discovery (pluggy): how installed distributions contribute estimators.

- :mod:`.hookspecs` — the one hook, ``rllm_adv_estimators``, and the ``hookimpl`` marker;
- :mod:`.manager` — the plugin manager, built lazily, knowing where every estimator came from;
- :mod:`rllm_plugins.estimators.builtin` — the built-in estimators, registered as the first plugin;
- :mod:`.mistakes` — entry points that would never take effect (a near-miss group, a missing target).

A plugin in three parts::

    # my_estimators.py
    import numpy as np
    from rllm_plugins import AdvEstimatorSpec, hookimpl

    def median_baseline(rewards, **_):
        return [r - np.median(r) for r in rewards], [r - np.median(r) for r in rewards]

    @hookimpl
    def rllm_adv_estimators():
        yield AdvEstimatorSpec(name="median_baseline", fn=median_baseline)

    # pyproject.toml
    [project.entry-points.rllm_plugins]
    my_estimators = "my_estimators"

Then ``AlgorithmConfig(estimator="median_baseline")``, verl's ``algorithm.adv_estimator=rllm_median_baseline``
and TRL's ``RLLMGRPOConfig(adv_estimator="median_baseline")`` select it.
"""
