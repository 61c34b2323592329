"""``RLLMAdvantagePlugin``: axolotl's plugin that hands its GRPO builder a trainer whose advantages come from an rLLM estimator.

With an ``rllm:`` block in the config (:mod:`rllm_axolotl.args`), ``get_trainer_cls`` returns
``RLLMAxolotlGRPOTrainer``: ``rllm_trl.RLLMAdvantageMixin`` before axolotl's own ``AxolotlGRPOTrainer`` (built once per
process; the same class every call). Without the block the plugin returns nothing and axolotl trains as it would without it
(the opt-out: leave the block out).

axolotl's RL builder calls a plugin's trainer class without the model and the reward functions (it passes those to its
own classes only), so the class's ``__init__`` adds them: the model the builder holds (handed to every plugin in
``add_callbacks_pre_trainer`` just before the trainer is built), and ``GRPOStrategy``'s reward functions and trainer
keywords (``reward_processing_classes``, ``rollout_func``) from the config, as axolotl's own path does. It then sets the
block's fields on axolotl's ``GRPOConfig`` so that the mixin reads them as it reads an ``RLLMGRPOConfig``'s.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from axolotl.integrations.base import BasePlugin

from rllm_axolotl.args import RLLMAdvantageArgs, check_trainer_choice

__all__ = ["RLLMAdvantagePlugin", "rllm_trainer_class"]

INPUT_ARGS = "rllm_axolotl.args.RLLMAxolotlArgs"


def _block(cfg: Any) -> dict[str, Any] | None:
    """The ``rllm`` block of axolotl's ``cfg`` as a dict of the fields set (None without one)."""
    block = cfg.get("rllm") if isinstance(cfg, dict) else getattr(cfg, "rllm", None)
    if block is None:
        return None
    checked = RLLMAdvantageArgs.model_validate(json.loads(json.dumps(block)))  # axolotl's DictDefault values as plain JSON values
    return {name: getattr(checked, name) for name in RLLMAdvantageArgs.model_fields}


@cache
def rllm_trainer_class() -> type:
    """``RLLMAxolotlGRPOTrainer``: the mixin before ``AxolotlGRPOTrainer`` (the class axolotl picks for GRPO without async or context
    parallelism), made once."""
    from axolotl.core.trainers.grpo import GRPOStrategy
    from rllm_trl.trainer import RLLMAdvantageMixin

    base = GRPOStrategy.get_trainer_class(context_parallel=False, async_grpo=False)

    class RLLMAxolotlGRPOTrainer(RLLMAdvantageMixin, base):  # type: ignore[misc, valid-type]
        """axolotl's ``AxolotlGRPOTrainer`` with rLLM advantages (``rllm_trl.RLLMAdvantageMixin``), built by axolotl's RL builder."""

        _rllm_plugin: RLLMAdvantagePlugin | None = None

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            plugin = type(self)._rllm_plugin
            if plugin is None or plugin.cfg is None:
                raise RuntimeError("RLLMAxolotlGRPOTrainer is built by axolotl's RL builder through RLLMAdvantagePlugin.get_trainer_cls")
            if not args and "model" not in kwargs:  # axolotl's builder passes a plugin's class no model, no reward functions
                if plugin.model is None:
                    raise RuntimeError("RLLMAxolotlGRPOTrainer: axolotl did not hand the plugin its model (add_callbacks_pre_trainer)")
                args = (plugin.model, *GRPOStrategy.set_trainer_args(plugin.cfg))
                for key, value in GRPOStrategy.set_trainer_kwargs(plugin.cfg).items():
                    kwargs.setdefault(key, value)
            training_args = kwargs.get("args")
            if training_args is None:
                raise RuntimeError("RLLMAxolotlGRPOTrainer: axolotl's builder passed no args (its GRPOConfig)")
            for name, value in (_block(plugin.cfg) or {}).items():  # read by the mixin as an RLLMGRPOConfig's fields
                setattr(training_args, name, value)
            super().__init__(*args, **kwargs)

    RLLMAxolotlGRPOTrainer.__module__ = __name__
    return RLLMAxolotlGRPOTrainer


class RLLMAdvantagePlugin(BasePlugin):
    """axolotl plugin: ``plugins: [rllm_axolotl.RLLMAdvantagePlugin]`` and an ``rllm:`` block select any rLLM estimator (with
    advantage transforms and reward shapers) for ``rl: grpo`` / ``rl: gdpo`` on ``AxolotlGRPOTrainer``."""

    def __init__(self) -> None:
        super().__init__()
        self.cfg: Any = None
        self.model: Any = None

    def get_input_args(self) -> str:
        return INPUT_ARGS

    def get_trainer_cls(self, cfg: Any) -> type | None:
        if _block(cfg) is None:
            return None
        check_trainer_choice(cfg)  # validated already; a config built around the validation is refused here too
        self.cfg = cfg
        trainer_class = rllm_trainer_class()
        trainer_class._rllm_plugin = self
        return trainer_class

    def add_callbacks_pre_trainer(self, cfg: Any, model: Any) -> list[Any]:
        self.model = model  # the builder's model, just before it builds the trainer
        return []
