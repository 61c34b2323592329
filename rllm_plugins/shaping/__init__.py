"""Reward shapers: a stage before the estimator, selected by name; their additive terms are recorded one by one.

- :mod:`.registry` — ``register_reward_shaper`` (a decorator) and lookup; plugins offer shapers through the hook
  ``rllm_reward_shapers`` (:mod:`rllm_plugins.discovery.hookspecs`);
- :mod:`.entries` — a configuration's list (``"name"``, ``("name", {options})``, ``{"name": ..., **options}``), resolved
  and checked at config time;
- :mod:`.terms` — ``shape_selected(rewards, selected, **context) -> (shaped, terms, metrics)``, the one call every path makes
  (through :class:`.stage.Shapers` in :mod:`rllm_plugins.run`); :mod:`.apply`'s ``shape_rewards`` takes a raw list too;
- the built-ins, one per module: :mod:`.dapo_overlong`, :mod:`.length_penalty`, :mod:`.efficiency`, :mod:`.group_length`,
  :mod:`.turn_count` (registered by :mod:`.builtin`).

What a shaper is and which context it may ask for by name: :mod:`rllm_plugins.shaper_spec`.
"""

from __future__ import annotations

from .apply import shape_rewards
from .entries import SelectedShaper, check_shaper_context, resolve_shapers
from .registry import UnknownShaperError, available_shapers, get_reward_shaper, register_reward_shaper, unregister_reward_shaper

__all__ = [
    "SelectedShaper",
    "UnknownShaperError",
    "available_shapers",
    "check_shaper_context",
    "get_reward_shaper",
    "register_reward_shaper",
    "resolve_shapers",
    "shape_rewards",
    "unregister_reward_shaper",
]
