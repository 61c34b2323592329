"""Let the ``rllm_*`` estimators read the batch's per-key reward scores (``algorithm.gdpo_reward_keys``).

verl's ``compute_advantage`` (``verl.trainer.ppo.ray_trainer``) hands ``non_tensor_batch``, where
the legacy trainer keeps the extra keys a ``compute_score`` returns, only to the estimator named
``gdpo``. The extension :data:`REWARD_KEYS` wraps that function so that, while it runs, the
DataProto it was given is visible to our estimators through a context variable
(:func:`current_non_tensor_batch`; :func:`current_tensor`, through which step-level estimators read
``responses``), and so is its ``gamma`` argument (:func:`current_gamma`), which verl gives only to ``gae``.
The original function is then called with the same arguments,
so every estimator, ours included, receives exactly the keyword arguments verl gives it; nothing
else changes. It is installed like every verl extension (:mod:`rllm_verl.extension`: lazily,
guarded by verl 0.9's signature, once, never raising); opt out with
``RLLM_PLUGINS_VERL_REWARD_KEYS=0``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from .extension import ADVANTAGE_PARAMETERS, NO_DEFAULT, Extension

__all__ = ["REWARD_KEYS", "REWARD_KEYS_ENV", "current_gamma", "current_non_tensor_batch", "current_tensor", "gamma_argument"]

REWARD_KEYS_ENV = "RLLM_PLUGINS_VERL_REWARD_KEYS"

_batch: contextvars.ContextVar[Any] = contextvars.ContextVar("rllm_verl_batch", default=None)
_gamma: contextvars.ContextVar[Any] = contextvars.ContextVar("rllm_verl_gamma", default=None)


def current_gamma() -> Any:
    """The ``gamma`` argument ``compute_advantage`` (or v1's ``compute_advantage_for_multi_trajectories``) was called with;
    None outside a call, or when the caller left it out."""
    return _gamma.get()


@contextlib.contextmanager
def gamma_argument(gamma: Any) -> Iterator[None]:
    """Make ``gamma`` (the argument verl gives only to ``gae``) what :func:`current_gamma` returns for the duration of a call."""
    token = _gamma.set(gamma)
    try:
        yield
    finally:
        _gamma.reset(token)


def current_non_tensor_batch(index: Any) -> dict[str, Any] | None:
    """The ``non_tensor_batch`` of the DataProto that ``compute_advantage`` is processing, if ``index`` is its ``uid`` array."""
    data = _batch.get()
    if data is None:
        return None
    non_tensor = getattr(data, "non_tensor_batch", None)
    if not isinstance(non_tensor, dict) or non_tensor.get("uid") is not index:
        return None
    return non_tensor


def current_tensor(index: Any, key: str) -> Any:
    """``batch[key]`` of the DataProto that ``compute_advantage`` is processing (if ``index`` is its ``uid`` array), else None."""
    data = _batch.get()
    if data is None or current_non_tensor_batch(index) is None:
        return None
    tensors = getattr(data, "batch", None)
    return tensors[key] if tensors is not None and key in tensors else None


def extend(original: Callable[..., Any]) -> Callable[..., Any]:
    """verl's ``compute_advantage``, with its ``data`` visible to :func:`current_non_tensor_batch` during the call."""

    signature = inspect.signature(original)

    @functools.wraps(original)
    def compute_advantage(data: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            gamma = signature.bind(data, *args, **kwargs).arguments.get("gamma")
        except TypeError:  # verl's own function will say what is wrong with the call
            gamma = None
        token = _batch.set(data)
        try:
            with gamma_argument(gamma):
                return original(data, *args, **kwargs)
        finally:
            _batch.reset(token)

    return compute_advantage


REWARD_KEYS = Extension(
    name="reward_keys",
    module="verl.trainer.ppo.ray_trainer",
    attribute="compute_advantage",
    parameters=(("data", NO_DEFAULT), *ADVANTAGE_PARAMETERS),
    make=extend,
    env=REWARD_KEYS_ENV,
    bound_in=("verl.trainer.ppo.v1.utils", "verl.experimental.separation.ray_trainer"),
)
