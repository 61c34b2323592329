"""Advantage transforms: a stage after the estimator, selected by name, applied in order.

- :mod:`.registry` — ``register_advantage_transform`` (a decorator) and lookup; plugins offer transforms
  through the hook ``rllm_advantage_transforms`` (:mod:`rllm_plugins.discovery.hookspecs`);
- :mod:`.entries` — a configuration's list (``"name"``, ``("name", {options})``, ``{"name": ..., **options}``),
  resolved and checked at config time;
- :mod:`.apply` — ``apply_transforms(advantages, entries, **context) -> (advantages, metrics)``, the one call a driver makes;
- the built-ins, one per module: :mod:`.clip`, :mod:`.scale`, :mod:`.kl_shaping` (registered by :mod:`.builtin`).

What a transform is and which context it may ask for by name: :mod:`rllm_plugins.transform_spec`.
"""

from __future__ import annotations

from .apply import apply_transforms, transform_metrics
from .entries import SelectedTransform, check_available_context, resolve_transforms, split_chain
from .registry import UnknownTransformError, available_transforms, get_transform, register_advantage_transform, unregister_advantage_transform

__all__ = [
    "SelectedTransform",
    "UnknownTransformError",
    "apply_transforms",
    "available_transforms",
    "check_available_context",
    "get_transform",
    "register_advantage_transform",
    "resolve_transforms",
    "split_chain",
    "transform_metrics",
    "unregister_advantage_transform",
]
