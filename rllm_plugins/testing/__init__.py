"""Contract checker for advantage estimators: :func:`check_estimator` and :func:`assert_estimator_contract`.

An estimator (a registered name, an :class:`~rllm_plugins.spec.AdvEstimatorSpec` or a plain list-form function) is
called on synthetic groups built from ``seed`` and checked against every rule in :data:`RULES`.
A rule that fails is reported with the smallest failing example found by shrinking (fewer
groups, fewer trajectories, simpler rewards). Plugin authors call it from their own tests::

    from rllm_plugins.testing import assert_estimator_contract

    def test_my_estimator_keeps_the_contract():
        assert_estimator_contract("my_estimator")

In a plugin's own test suite, :func:`parametrize_with_checks` makes every rule (and every conformance cell) one
pytest item.

The rules, one function each, are in :mod:`.rules`; running them in :mod:`.runner`; shrinking a
failing case in :mod:`.shrinker`; calling the estimator as the collector and adapters do in :mod:`.calls`.
"""

from .calls import Case
from .parametrize import Check, parametrize_with_checks
from .rules import RULES
from .runner import ContractReport, Violation, assert_estimator_contract, check_estimator

__all__ = ["RULES", "Case", "Check", "ContractReport", "Violation", "assert_estimator_contract", "check_estimator", "parametrize_with_checks"]
