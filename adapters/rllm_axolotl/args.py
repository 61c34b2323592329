"""The ``rllm:`` block of an axolotl config, checked when axolotl validates the config.

axolotl merges a plugin's input model into its config model (``BasePlugin.get_input_args``), so :class:`RLLMAxolotlArgs`
adds one field, ``rllm`` (:class:`RLLMAdvantageArgs`: the advantage fields of ``rllm_trl.RLLMGRPOConfig``, same names, same
meanings), and a validator that runs with the whole config: it refuses a trainer the plugin cannot serve, by name
(:data:`rllm_axolotl.versions.REFUSED`), and resolves the block with ``rllm_trl``'s own checks on the TRL settings the
config gives GRPO (``trl.num_generations``, ``trl.scale_rewards``, ``trl.multi_objective_aggregation``, ``trl.beta``).
"""

from __future__ import annotations

import dataclasses
import warnings
from types import SimpleNamespace
from typing import Any

from pydantic import BaseModel, ConfigDict, StrictBool, model_validator

__all__ = ["GRPO_TYPES", "RLLMAdvantageArgs", "RLLMAxolotlArgs", "check_trainer_choice", "grpo_view", "resolve"]

GRPO_TYPES = ("grpo", "gdpo")  # axolotl's rl values served by its GRPO trainers (gdpo: normalize_then_sum)
WHERE = "rllm"


class RLLMAdvantageArgs(BaseModel):
    """The ``rllm:`` block: ``rllm_trl.RLLMGRPOConfig``'s advantage fields (see docs/trl.md for each)."""

    model_config = ConfigDict(extra="forbid")

    adv_estimator: str = "grpo"
    norm_adv_by_std_in_grpo: StrictBool = True
    adv_estimator_kwargs: dict[str, Any] | None = None
    adv_estimator_map: dict[str, Any] | None = None
    role_column: str | None = None
    advantage_transforms: list[Any] | None = None
    reward_shapers: list[Any] | None = None


def _value(config: Any, name: str) -> Any:
    return config.get(name) if isinstance(config, dict) else getattr(config, name, None)


def _rl(config: Any) -> str | None:
    rl = _value(config, "rl")
    return None if rl is None else str(getattr(rl, "value", rl))


def check_trainer_choice(config: Any) -> None:
    """Raise ``ValueError`` when ``config`` (axolotl's, validated or a ``DictDefault``) has axolotl pick a GRPO trainer whose advantages
    the plugin cannot replace (:data:`rllm_axolotl.versions.REFUSED`, named), or no GRPO trainer at all."""
    from rllm_axolotl.versions import REFUSED

    rl = _rl(config)
    if rl not in GRPO_TYPES:
        raise ValueError(f"{WHERE}: rllm-plugins selects the advantages of axolotl's GRPO trainers (rl: grpo or gdpo), and this config has rl: {rl}")
    trl = _value(config, "trl")
    asynchronous = bool(trl is not None and (_value(trl, "async_prefetch") or _value(trl, "use_data_producer")))
    context_parallel = (_value(config, "context_parallel_size") or 1) > 1
    for refused, chosen in zip(REFUSED, (asynchronous, context_parallel), strict=True):
        if chosen:
            raise ValueError(
                f"{WHERE}: axolotl picks {refused.trainer} for {refused.when}, and rllm-plugins does not support it: {refused.why}. "
                f"Train with AxolotlGRPOTrainer (leave {refused.when} unset) to select the advantages, or drop the rllm block"
            )


def grpo_view(config: Any, block: Any) -> SimpleNamespace:
    """The GRPOConfig fields ``rllm_trl`` reads, as axolotl's GRPO builder will set them from ``config``, with the ``rllm`` block's."""
    from trl import GRPOConfig

    defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig) if f.default is not dataclasses.MISSING}
    trl = _value(config, "trl")

    def from_trl(name: str, default: Any) -> Any:
        value = None if trl is None else _value(trl, name)
        return default if value is None else value

    rl_beta = _value(config, "rl_beta")
    aggregation = from_trl("multi_objective_aggregation", "normalize_then_sum" if _rl(config) == "gdpo" else defaults["multi_objective_aggregation"])
    fields = {name: getattr(block, name) for name in RLLMAdvantageArgs.model_fields} if isinstance(block, BaseModel) else dict(block)
    return SimpleNamespace(
        num_generations=from_trl("num_generations", defaults["num_generations"]),
        num_generations_eval=defaults["num_generations_eval"],
        scale_rewards=from_trl("scale_rewards", defaults["scale_rewards"]),
        multi_objective_aggregation=aggregation,
        beta=from_trl("beta", defaults["beta"] if rl_beta is None else rl_beta),
        remove_unused_columns=False,  # GRPOConfig's default, which axolotl's GRPO builder keeps
        **fields,
    )


def resolve(config: Any, block: Any) -> Any:
    """The ``rllm`` block resolved with ``rllm_trl``'s checks (``rllm_trl.config.advantage_settings``) on ``config``'s GRPO settings;
    each TRL setting an estimator in use overrides gives a ``UserWarning``, as ``RLLMGRPOConfig`` does."""
    from rllm_trl.config import advantage_settings

    from rllm_axolotl.versions import check_axolotl

    check_axolotl(WHERE)
    check_trainer_choice(config)
    settings = advantage_settings(grpo_view(config, block))
    for line in settings.overridden:
        warnings.warn(f"{WHERE}: {line}", UserWarning, stacklevel=2)
    return settings


class RLLMAxolotlArgs(BaseModel):
    """What the plugin adds to axolotl's config model: the ``rllm`` block, checked with the whole config."""

    rllm: RLLMAdvantageArgs | None = None

    @model_validator(mode="after")
    def _check_rllm(self) -> RLLMAxolotlArgs:
        if self.rllm is not None:
            resolve(self, self.rllm)
        return self
