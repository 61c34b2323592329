"""Register every rLLM estimator into verl's ``ADV_ESTIMATOR_REGISTRY`` as ``rllm_<name>``."""

from __future__ import annotations

import logging

from rllm_plugins.discovery import manager
from rllm_plugins.registry import available_estimators
from rllm_plugins.spec import validate_name
from rllm_verl.compute.outcome import verl_estimator

__all__ = ["VERL_PREFIX", "register_estimators_into_verl", "rllm_name", "rllm_names_in_verl", "verl_name"]

VERL_PREFIX = "rllm_"

logger = logging.getLogger(__name__)


def verl_name(name: str) -> str:
    """verl's name of the rLLM estimator ``name``: ``"rloo" -> "rllm_rloo"``."""
    return f"{VERL_PREFIX}{name}"


def rllm_name(adv_estimator: object) -> str | None:
    """The rLLM estimator behind verl's name ``adv_estimator`` when we registered it, else None (verl's own, or unknown)."""
    if not isinstance(adv_estimator, str):
        return None
    from verl.trainer.ppo import core_algos

    return getattr(core_algos.ADV_ESTIMATOR_REGISTRY.get(adv_estimator), "rllm_estimator", None)


def register_estimators_into_verl() -> list[str]:
    """Register every estimator of our registry (built-ins, installed plugins, user code) into verl.

    Idempotent: names already registered by us are kept; a name verl already knows from someone
    else is left alone with a warning. Names offered by two plugins are registered too, so that
    using one reports the conflict, and so are the entry-point names of plugins that failed to
    load or are disabled, so that using one says why. Returns the ``rllm_*`` names now in verl's
    registry, sorted.
    """
    from verl.trainer.ppo import core_algos

    registry = core_algos.ADV_ESTIMATOR_REGISTRY
    state = manager.plugin_state()
    names = set(available_estimators()) | set(state.conflicts) | {r.name for r in state.records if r.why_unavailable() and _valid(r.name)}
    for name in sorted(names):
        key = verl_name(name)
        existing = registry.get(key)
        if existing is None:
            core_algos.register_adv_est(key)(verl_estimator(name))
        elif getattr(existing, "rllm_estimator", None) != name:
            logger.warning(
                "verl already has an advantage estimator %r (%s.%s); the rLLM estimator %r is not registered under that name",
                key,
                getattr(existing, "__module__", "?"),
                getattr(existing, "__qualname__", existing),
                name,
            )
    return rllm_names_in_verl()


def _valid(name: str) -> bool:
    try:
        return validate_name(name) == name
    except ValueError:
        return False


def rllm_names_in_verl() -> list[str]:
    """The ``rllm_*`` names in verl's registry that run an rLLM estimator, sorted."""
    from verl.trainer.ppo import core_algos

    return sorted(key for key, fn in core_algos.ADV_ESTIMATOR_REGISTRY.items() if getattr(fn, "rllm_estimator", None) is not None)
