"""Select estimators by name: ``register_rllm_adv_estimator`` and ``get_rllm_adv_estimator``.

Names are looked up in this order: explicit registrations in user code, then the built-ins
and installed plugins (discovered on first use; see :mod:`.discovery`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .config import AlgorithmConfig
from .discovery import manager
from .discovery.unresolved import resolve, unavailable_because, unknown_message
from .spec import AdvEstimatorSpec, BatchedEstimator, Estimator, ListEstimator, normalize_name, validate_name

__all__ = [
    "Estimator",
    "EstimatorConflictError",
    "UnknownEstimatorError",
    "available_estimators",
    "get_adv_estimator",
    "get_estimator",
    "get_estimator_spec",
    "get_rllm_adv_estimator",
    "prepare_adv_estimator_input",
    "register_adv_estimator",
    "register_rllm_adv_estimator",
    "state_schemas",
    "unavailable_because",
    "unregister_rllm_adv_estimator",
]


class UnknownEstimatorError(ValueError):
    """No estimator is registered under the name."""


class EstimatorConflictError(ValueError):
    """Several installed plugins offer the name."""


def register_rllm_adv_estimator(
    name: Any,
    *,
    batched: BatchedEstimator | None = None,
    description: str = "",
    aliases: tuple[str, ...] = (),
    level: str = "outcome",
    needs_anchors: bool = False,
    stateful: bool = False,
) -> Callable[[ListEstimator], ListEstimator]:
    """Decorator: register a list-form estimator under ``name`` (a str or ``rLLMAdvantageEstimator``).

    ``batched`` optionally gives the fast ``(values, offsets) -> advantages`` form the adapters
    use; ``level="step"`` registers a step-level estimator (:mod:`.steps.forms`), ``stateful=True`` one
    with memory across calls (:mod:`.state`). In user code this
    may override a built-in or plugin name, with a warning naming both; inside a module loaded
    through the ``rllm_plugins`` entry point it registers for that plugin.
    """
    key = validate_name(name)

    def decorator(func: ListEstimator) -> ListEstimator:
        spec = AdvEstimatorSpec(
            key, fn=func, batched=batched, description=description, aliases=aliases, level=level, needs_anchors=needs_anchors, stateful=stateful
        )
        if manager.loading_provider() is not None:
            manager.capture(spec)
            return func
        provider = manager.Provider(f"{func.__module__}.{func.__qualname__}", kind="user")
        for n, previous in manager.add_user_estimator(Estimator(spec, provider)):
            warnings.warn(f"estimator {n!r} from {provider} overrides the one from {previous.provider}", UserWarning, stacklevel=2)
        return func

    return decorator


def unregister_rllm_adv_estimator(name: Any) -> None:
    """Remove a user-code registration (and its aliases); built-ins and plugins stay."""
    key = normalize_name(name)
    if not manager.remove_user_estimator(key):
        raise UnknownEstimatorError(f"no estimator {key!r} was registered in user code")


def get_estimator(name: Any) -> Estimator:
    """The registered estimator for ``name``, with its provider and both calling forms."""
    key = normalize_name(name)
    state = manager.plugin_state()
    return resolve(
        key, manager.user_estimator(key), state.estimators, state.conflicts, kind="estimator", conflict_error=EstimatorConflictError,
        unknown=lambda: UnknownEstimatorError(_unknown_message(name, key)),
    )  # fmt: skip


def _unknown_message(name: Any, key: str) -> str:
    names = available_estimators()
    if key == "other":
        return (
            "rLLMAdvantageEstimator.OTHER stands for 'some other estimator' and cannot be computed; "
            f"set the name of a registered estimator instead. Available: {', '.join(names)}"
        )
    hint = ""
    if key.startswith("rllm_") and key.removeprefix("rllm_") in names:  # verl's spelling of one of ours
        hint = f" The 'rllm_' prefix is verl's spelling (algorithm.adv_estimator=rllm_<name>); here the name is {key.removeprefix('rllm_')!r}."
    return unknown_message(
        name,
        key,
        kind="estimator",
        unknown="Unknown advantage estimator",
        names=names,
        offered=lambda record: record.estimators,
        register="Register a custom one with @register_rllm_adv_estimator or install an estimator plugin.",
        hint=hint,
    )


def get_estimator_spec(name: Any) -> AdvEstimatorSpec:
    """The :class:`AdvEstimatorSpec` registered under ``name``."""
    return get_estimator(name).spec


def get_rllm_adv_estimator(name: Any) -> ListEstimator:
    """The list-form estimator registered under ``name`` (a str or ``rLLMAdvantageEstimator``).

    Unknown names raise ``ValueError`` listing the available names and the closest match.
    """
    return get_estimator(name).list_form


register_adv_estimator = register_rllm_adv_estimator  # the short name of rLLM's terminal-rl branch (a5fa9aa1)
get_adv_estimator = get_rllm_adv_estimator  # the short name of rLLM's terminal-rl branch (a5fa9aa1)


def available_estimators() -> list[str]:
    """Every name that resolves to exactly one estimator, sorted."""
    state = manager.plugin_state()
    return sorted(set(state.estimators) | set(manager.user_overrides()))


def prepare_adv_estimator_input(rewards: list[Any], algorithm_config: AlgorithmConfig, traj_groups: list[Any] | None = None) -> dict[str, Any]:
    """Keyword arguments of one estimator call: both rLLM signature generations find theirs.

    ``rewards`` (one array per group), ``algorithm_config``, ``traj_groups``,
    ``norm_adv_by_std_in_grpo``, plus ``algorithm_config.estimator_kwargs``.
    """
    return {
        **algorithm_config.estimator_kwargs,
        "rewards": rewards,
        "algorithm_config": algorithm_config,
        "traj_groups": traj_groups,
        "norm_adv_by_std_in_grpo": algorithm_config.norm_adv_by_std_in_grpo,
    }


def state_schemas(names: Iterable[str]) -> dict[str, Mapping[str, Any] | None]:
    """``state_schema`` of each installed estimator of ``names`` (an unknown name is left out: checked at its first call)."""
    out = {}
    for name in names:
        try:
            out[name] = get_estimator(name).spec.state_schema
        except ValueError:
            continue
    return out
