"""rLLM-native advantage estimators in axolotl's GRPO, selected from its YAML through axolotl's plugin system.

Add the plugin and an ``rllm:`` block (the fields of ``rllm_trl.RLLMGRPOConfig``) to an axolotl config::

    plugins:
      - rllm_axolotl.RLLMAdvantagePlugin
    rl: grpo
    rllm:
      adv_estimator: rloo

``RLLMAdvantagePlugin`` (:mod:`rllm_axolotl.plugin`) hands axolotl a GRPO trainer with ``rllm_trl``'s mixin;
:mod:`rllm_axolotl.args` checks the block when axolotl validates the config; :mod:`rllm_axolotl.versions` knows
the axolotl release and what the plugin relies on in it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rllm_plugins.extras import missing_modules

_MISSING = missing_modules(["axolotl", "trl", "torch"])
if _MISSING:
    raise ModuleNotFoundError(
        f"rllm_axolotl needs axolotl, trl and torch, and {', '.join(_MISSING)} not installed. "
        'Install axolotl (Python >= 3.12): pip install "axolotl>=0.21,<0.22", then rllm-plugins',
        name=_MISSING[0],
    )

EXPORTS = {"RLLMAdvantagePlugin": "plugin", "RLLMAdvantageArgs": "args", "RLLMAxolotlArgs": "args"}

__all__ = ["RLLMAdvantageArgs", "RLLMAdvantagePlugin", "RLLMAxolotlArgs"]

if TYPE_CHECKING:
    from rllm_axolotl.args import RLLMAdvantageArgs, RLLMAxolotlArgs
    from rllm_axolotl.plugin import RLLMAdvantagePlugin


def __getattr__(name: str) -> Any:
    module = EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *EXPORTS})
