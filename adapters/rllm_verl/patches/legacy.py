"""Let the ``rllm_*`` estimators read the batch's per-key reward scores (``algorithm.gdpo_reward_keys``).

verl's ``compute_advantage`` (``verl.trainer.ppo.ray_trainer``; where a verl defines it elsewhere, there:
:data:`rllm_verl.versions.ADVANTAGE_MODULES`) hands ``non_tensor_batch``, where
the legacy trainer keeps the extra keys a ``compute_score`` returns, only to the estimator named
``gdpo``. The extension :data:`REWARD_KEYS` wraps that function so that, while it runs, the
DataProto it was given is visible to our estimators through a context variable
(:func:`~rllm_verl.context.current_non_tensor_batch`; :func:`~rllm_verl.context.current_tensor`, through which step-level estimators read
``responses``), and so are its ``gamma``, ``lam`` and ``norm_adv_by_std_in_grpo`` arguments (:func:`~rllm_verl.context.current_arguments`),
which verl gives only to its own ``gae`` and ``grpo``.
The original function is then called with the same arguments,
so every estimator, ours included, receives exactly the keyword arguments verl gives it. Then, when
``algorithm.rllm_advantage_transforms`` lists transforms, they run on the advantages verl's call wrote
(:mod:`rllm_verl.compute.transforms`): all of them after verl's own estimators, the token part after ``rllm_*`` ones
(whose run applied the rest); ``algorithm.rllm_reward_shapers`` shape the rewards verl's own estimators read for the length
of the call (:func:`rllm_verl.compute.shaping.own_shaping`); v1 reaches this function too. It is
installed like every verl extension (:mod:`rllm_verl.extension`: lazily, guarded by verl 0.9's signature,
once, never raising), in the module that defines the function and in every module that imported it by name; opt out
with ``RLLM_PLUGINS_VERL_REWARD_KEYS=0`` (which also turns the transforms off).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable
from typing import Any

from rllm_verl.compute.shaping import own_shaping
from rllm_verl.compute.transforms import transform_configured
from rllm_verl.context import LEGACY_EXTENSION, REWARD_KEYS_ENV, processing
from rllm_verl.extension import ADVANTAGE_PARAMETERS, NO_DEFAULT, Extension
from rllm_verl.registration import rllm_name
from rllm_verl.versions import ADVANTAGE_MODULES

__all__ = ["REWARD_KEYS", "REWARD_KEYS_ENV"]


def extend(original: Callable[..., Any]) -> Callable[..., Any]:
    """verl's ``compute_advantage``, with its ``data`` visible to :func:`~rllm_verl.context.current_non_tensor_batch` during the call."""

    signature = inspect.signature(original)

    @functools.wraps(original)
    def compute_advantage(data: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            given = signature.bind(data, *args, **kwargs).arguments  # the arguments passed, not their defaults
        except TypeError:  # verl's own function will say what is wrong with the call
            given = {}
        ours = rllm_name(given.get("adv_estimator")) is not None
        # algorithm.rllm_reward_shapers before verl's own estimator (an rllm_* estimator's run shapes its units itself)
        with processing(data, given), contextlib.nullcontext() if ours else own_shaping(data, given.get("config"), estimator=given.get("adv_estimator")):
            out = original(data, *args, **kwargs)
        # algorithm.rllm_advantage_transforms after any estimator: an rllm_* estimator's run applied their unit part already
        transform_configured(out, given.get("config"), units_done=ours)
        return out

    return compute_advantage


REWARD_KEYS = Extension(
    name=LEGACY_EXTENSION,
    module=ADVANTAGE_MODULES[0],
    attribute="compute_advantage",
    parameters=(("data", NO_DEFAULT), *ADVANTAGE_PARAMETERS),
    make=extend,
    env=REWARD_KEYS_ENV,
    bound_in=("verl.trainer.ppo.v1.utils", "verl.experimental.separation.ray_trainer"),
    defined_in=ADVANTAGE_MODULES[1:],
    follow=True,  # wherever verl defines it, and every module that imported it by name
)
