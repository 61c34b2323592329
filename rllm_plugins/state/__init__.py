"""Estimators with memory: the state a stateful estimator carries across calls, and who keeps it.

- :mod:`.store` — :class:`EstimatorState` (one state per estimator and role, with the options that made it), the state
  file and its resume rules, and :func:`call_stateful` (a call that leaves the kept state unchanged on error);
- :mod:`.views` — the read-only views an estimator is handed and the per-key updates it returns, so a call costs its batch;
- :mod:`.schema` — a stateful spec's ``state_schema`` (``MapOf``) and its checks;
- the options a stateful estimator ran with, as the state file records them, come from
  :func:`rllm_plugins.options.state_options` (above the registry).
"""

from .schema import MapOf
from .store import STATE_FORMAT, EstimatorState, call_stateful
from .views import updated

__all__ = ["STATE_FORMAT", "EstimatorState", "MapOf", "call_stateful", "updated"]
